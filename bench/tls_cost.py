"""What TLS costs the proxy (bench/run.py --sections tls): `tools/call` on the demo server through
one proxy, each path measured beside its plain twin in the same interleaved rounds.

- upstream: the proxy reaching the demo through nginx over http://, and through the same nginx
  over https:// (TLS terminated by nginx, the proxy verifying it by a CA made for the run);
- listener: the client reaching the proxy over http://, and over https:// (the proxy's [tls],
  mcp-bench trusting the run's CA), the demo behind it over HTTP.

Connections are kept alive on every hop, so a handshake is paid once per connection, not per
call. Per path and concurrency level: the medians of the rounds' p50, p99 and req/s, and the
proxy's own CPU per call; and each TLS path over its plain twin."""

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from balancer import find_balancer, render_balancer_config
from processes import PROXY, ROOT, Target, bench, free_port, medians, wait_for_port

# (name, its plain twin or None): the order of the table.
PATHS = [
    ("upstream over http://", None),
    ("upstream over https://", "upstream over http://"),
    ("listener over http://", None),
    ("listener over https://", "listener over http://"),
]
LEVELS = (1, 8)
TARGET_RATIO = 1.2


def certificates(folder: Path):
    """A CA and a certificate it signed for 127.0.0.1 and localhost (ca.pem, server.pem,
    server-key.pem), made with openssl in `folder`."""
    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl("req", "-x509", *ec, "-days", "2", "-subj", "/CN=bench ca", "-keyout", "ca-key.pem",
            "-out", "ca.pem")
    (folder / "server.ext").write_text("basicConstraints=CA:FALSE\n"
                                       "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                                       "extendedKeyUsage=serverAuth\n")
    openssl("req", *ec, "-subj", "/CN=server", "-keyout", "server-key.pem", "-out", "server.csr")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem",
            "-CAcreateserial", "-days", "2", "-extfile", "server.ext", "-out", "server.pem")


class Nginx:
    """config/nginx.conf in front of the demo, on one port over http:// and on another over
    https:// (the same server block, its listen line with `ssl` and the run's certificate);
    stopped by its PID."""

    def __init__(self, folder: Path, demo_port: int):
        self.dir = folder / "nginx"
        self.dir.mkdir()
        os.chmod(folder, 0o755)
        os.chmod(self.dir, 0o755)  # nginx's workers, run as another user, read here
        self.plain, self.tls = free_port(), free_port()
        shipped = (ROOT / "config" / "nginx.conf").read_text()
        try:
            import pwd
            pwd.getpwnam("www-data")
        except KeyError:  # a machine without Debian's nginx user: the workers run as nobody
            shipped = shipped.replace("user www-data;", "")
        conf = render_balancer_config("nginx", shipped, f"127.0.0.1:{self.plain}",
                                      [f"127.0.0.1:{demo_port}"], str(self.dir))
        server = conf[conf.index("    server {"):conf.rindex("}")]
        secured = server.replace(f"listen 127.0.0.1:{self.plain};",
                                 f"listen 127.0.0.1:{self.tls} ssl;\n"
                                 f"        ssl_certificate {folder}/server.pem;\n"
                                 f"        ssl_certificate_key {folder}/server-key.pem;")
        conf = conf[:conf.rindex("}")] + secured + "}\n"
        (self.dir / "nginx.conf").write_text(conf)
        self.process = subprocess.Popen(
            [find_balancer("nginx"), "-c", str(self.dir / "nginx.conf"), "-p", f"{self.dir}/",
             "-e", "stderr", "-g", "daemon off;"], stdout=subprocess.DEVNULL,
            stderr=open(self.dir / "output.log", "ab"), start_new_session=True)
        wait_for_port(self.plain, self.process)
        wait_for_port(self.tls, self.process)

    def stop(self):
        os.killpg(self.process.pid, 15)
        self.process.wait()


def measure_tls(calls, rounds=7):
    """The four paths of PATHS, up at once, in `rounds` interleaved rounds at 1 and 8 sessions."""
    folder = Path(tempfile.mkdtemp(prefix="mcp-bench-tls-"))
    env = {"RUST_LOG": "warn"}
    started, nginx = [], None
    try:
        certificates(folder)
        ca = folder / "ca.pem"
        demo_port = free_port()
        demo = Target("demo", [str(PROXY), "demo-server", "--http", f"127.0.0.1:{demo_port}"],
                      demo_port)
        started.append(demo)
        nginx = Nginx(folder, demo_port)

        def proxy(name, *options, scheme="http"):
            port = free_port()
            target = Target(name, [str(PROXY), "--listen", f"127.0.0.1:{port}", *map(str, options)],
                            port, env=env)
            started.append(target)
            return target, f"{scheme}://127.0.0.1:{port}/mcp"

        paths = {
            "upstream over http://": proxy("http", "--http", f"http://127.0.0.1:{nginx.plain}/mcp"),
            "upstream over https://": proxy("https", "--http", f"https://127.0.0.1:{nginx.tls}/mcp",
                                            "--upstream-ca-file", ca,
                                            "--upstream-platform-roots", "false"),
            "listener over http://": proxy("plain", "--http", f"http://127.0.0.1:{demo_port}/mcp"),
            "listener over https://": proxy("tls", "--http", f"http://127.0.0.1:{demo_port}/mcp",
                                            "--tls-cert", folder / "server.pem",
                                            "--tls-key", folder / "server-key.pem",
                                            scheme="https"),
        }
        samples = {(name, s): [] for name, _ in PATHS for s in LEVELS}
        for round_ in range(rounds):
            order = PATHS[round_ % len(PATHS):] + PATHS[:round_ % len(PATHS)]
            for sessions in LEVELS:
                for name, _ in order:
                    target, url = paths[name]
                    trust = ["--ca-file", ca] if url.startswith("https") else []
                    before = target.cpu_seconds()
                    r = bench("calls", "--url", url, "--sessions", sessions,
                              "--calls", max(calls // sessions, 50), "--warmup", 20, *trust)
                    r["cpu_us_per_call"] = ((target.cpu_seconds() - before) * 1e6
                                            / (r["calls"] + 20 * sessions))
                    samples[(name, sessions)].append(r)
    finally:
        for target in started:
            target.stop()
        if nginx is not None:
            nginx.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return medians(samples, ("p50_us", "p99_us", "throughput_rps", "cpu_us_per_call"))


def tls_table(figures, rounds=7):
    lines = ["### What TLS costs", "",
             "`tools/call` (echo) on the demo server over HTTP through one proxy. Upstream: the proxy",
             "reaches the demo through nginx (config/nginx.conf) over http://, or through the same nginx",
             "over https:// (nginx terminating TLS, the proxy verifying its certificate by a CA made for the",
             "run). Listener: the client reaches the proxy over http://, or over https:// (`[tls]`,",
             "mcp-bench trusting the CA). Every hop keeps its connections alive, so a handshake is paid",
             f"once per connection. All four up at once, {rounds} interleaved rounds, medians; CPU µs/call",
             f"is the proxy's own. Target: each TLS path within {TARGET_RATIO}× its plain twin.", "",
             "| path | sessions | p50 µs | p99 µs | req/s | CPU µs/call | p50 ÷ plain | CPU ÷ plain |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for sessions in LEVELS:
        for name, twin in PATHS:
            f = figures[(name, sessions)]
            ratios = "| | "
            if twin:
                base = figures[(twin, sessions)]
                ratios = (f"| {f['p50_us'] / base['p50_us']:.2f} "
                          f"| {f['cpu_us_per_call'] / base['cpu_us_per_call']:.2f} ")
            lines.append(f"| {name} | {sessions} | {f['p50_us']:.0f} | {f['p99_us']:.0f} "
                         f"| {f['throughput_rps']:.0f} | {f['cpu_us_per_call']:.0f} {ratios}|")
    return lines + [""]


def tls_json(figures):
    return {f"{name} / {sessions}": f for (name, sessions), f in figures.items()}


if __name__ == "__main__":
    print(json.dumps(tls_json(measure_tls(400, rounds=1)), indent=1))

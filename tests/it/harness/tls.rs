//! TLS for tests, made at test time with the `openssl` command: a CA, a server certificate for
//! `localhost` and `127.0.0.1` and a client certificate it signed, and a second CA nobody
//! trusts; and nginx terminating TLS (optionally asking for a client certificate from the CA)
//! in front of a plain HTTP server. Everything lives in a folder of its own, removed when the
//! test passes; nginx is stopped by its own handle.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use tokio::process::{Child, Command};

use super::balancer::{accepting, fresh_dir, installed, terminate};
use super::free_port;

/// Certificates and keys in PEM files.
pub struct Certificates {
    pub dir: PathBuf,
}

impl Certificates {
    /// A CA; `server.pem` for localhost and 127.0.0.1, `expired.pem` the same but expired
    /// since yesterday, `client.pem` (`CN=client`) and `bob.pem` (`CN=bob`), and `replica.pem`
    /// naming only `mcp-proxy` (a Service's
    /// name, for servers and clients both, as replicas share one), signed by it; and
    /// `other-ca.pem`, a CA that signed only `rotated.pem` (a server certificate like
    /// `server.pem`).
    pub fn make() -> Certificates {
        let dir = fresh_dir("tls");
        let certificates = Certificates { dir };
        certificates.ca("ca");
        certificates.ca("other-ca");
        let server = "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth";
        certificates.leaf("server", server, "2");
        certificates.leaf("expired", server, "-1");
        certificates.leaf("client", "extendedKeyUsage=clientAuth", "2");
        certificates.leaf("bob", "extendedKeyUsage=clientAuth", "2");
        let replica = "subjectAltName=DNS:mcp-proxy\nextendedKeyUsage=serverAuth,clientAuth";
        certificates.leaf("replica", replica, "2");
        certificates.leaf_of("other-ca", "rotated", server, "2");
        certificates
    }

    /// The path of a file made here (`ca.pem`, `server-key.pem`, …).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// [`Certificates::path`] as a string, for a command line.
    pub fn arg(&self, name: &str) -> String {
        self.path(name).to_str().unwrap().to_owned()
    }

    /// A replica's flags as Kubernetes runs replicas over TLS: the listener shows `replica.pem`
    /// (naming the Service, `mcp-proxy`), and the hop trusts the CA alone and verifies the
    /// others by that name.
    pub fn replica_flags(&self) -> Vec<String> {
        vec![
            "--tls-cert".into(),
            self.arg("replica.pem"),
            "--tls-key".into(),
            self.arg("replica-key.pem"),
            "--cluster-ca-file".into(),
            self.arg("ca.pem"),
            "--cluster-server-name".into(),
            "mcp-proxy".into(),
        ]
    }

    fn ca(&self, name: &str) {
        self.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN=test {name}"),
            "-keyout",
            &format!("{name}-key.pem"),
            "-out",
            &format!("{name}.pem"),
        ]);
    }

    /// A certificate signed by the CA, valid `days` from now (`-1`: it ended yesterday).
    fn leaf(&self, name: &str, extensions: &str, days: &str) {
        self.leaf_of("ca", name, extensions, days)
    }

    /// A certificate signed by the CA `ca` (`ca`, `other-ca`).
    fn leaf_of(&self, ca: &str, name: &str, extensions: &str, days: &str) {
        let extensions_file = format!("{name}.ext");
        std::fs::write(
            self.dir.join(&extensions_file),
            format!("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n{extensions}\n"),
        )
        .unwrap();
        self.openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &format!("{name}-key.pem"),
            "-out",
            &format!("{name}.csr"),
        ]);
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}-key.pem"),
            "-CAcreateserial",
            "-days",
            days,
            "-extfile",
            &extensions_file,
            "-out",
            &format!("{name}.pem"),
        ]);
    }

    fn openssl(&self, args: &[&str]) {
        let output = std::process::Command::new("openssl")
            .args(args)
            .current_dir(&self.dir)
            .output()
            .expect("openssl runs (scripts/test installs it)");
        assert!(
            output.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

impl Drop for Certificates {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// nginx terminating TLS on 127.0.0.1 in front of a plain HTTP server.
pub struct TlsFront {
    child: Option<Child>,
    pub addr: SocketAddr,
    dir: PathBuf,
}

impl TlsFront {
    /// nginx serving `server.pem` in front of `upstream`; with `verify_client` it refuses
    /// clients without a certificate from `ca.pem`.
    pub async fn start(
        certificates: &Certificates,
        upstream: SocketAddr,
        verify_client: bool,
    ) -> TlsFront {
        TlsFront::serving(certificates, "server", upstream, verify_client).await
    }

    /// nginx serving the certificate `leaf` (`server`, `expired`) in front of `upstream`.
    pub async fn serving(
        certificates: &Certificates,
        leaf: &str,
        upstream: SocketAddr,
        verify_client: bool,
    ) -> TlsFront {
        let program = installed("nginx");
        let dir = fresh_dir("nginx-tls");
        for _ in 0..3 {
            let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
            let config = dir.join("nginx.conf");
            std::fs::write(
                &config,
                config_text(certificates, leaf, &dir, addr, upstream, verify_client),
            )
            .unwrap();
            let output = std::fs::File::create(dir.join("output.log")).unwrap();
            let mut child = Command::new(&program)
                .arg("-c")
                .arg(&config)
                .arg("-p")
                .arg(format!("{}/", dir.display()))
                .args(["-e", "stderr", "-g", "daemon off;"])
                .stdin(Stdio::null())
                .stdout(output.try_clone().unwrap())
                .stderr(output)
                .kill_on_drop(true)
                .spawn()
                .expect("nginx starts");
            if accepting(&mut child, addr).await {
                return TlsFront {
                    child: Some(child),
                    addr,
                    dir,
                };
            }
        }
        panic!(
            "nginx did not start:\n{}",
            std::fs::read_to_string(dir.join("output.log")).unwrap_or_default()
        );
    }

    /// How many connections (each a TLS handshake) the requests it served came on.
    pub fn connections_used(&self) -> usize {
        let log = std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default();
        log.lines().collect::<std::collections::HashSet<_>>().len()
    }

    /// How many requests it served.
    pub fn requests_served(&self) -> usize {
        let log = std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default();
        log.lines().count()
    }

    /// Its MCP endpoint, as `https://127.0.0.1:<port>/mcp`.
    pub fn url(&self) -> String {
        format!("https://{}/mcp", self.addr)
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            terminate(child);
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn config_text(
    certificates: &Certificates,
    leaf: &str,
    dir: &Path,
    addr: SocketAddr,
    upstream: SocketAddr,
    verify_client: bool,
) -> String {
    let file = |name: &str| certificates.path(name).display().to_string();
    let dir = dir.display();
    let verify = match verify_client {
        true => format!(
            "ssl_client_certificate {};\n        ssl_verify_client on;",
            file("ca.pem")
        ),
        false => String::new(),
    };
    format!(
        "worker_processes 1;\npid {dir}/nginx.pid;\nerror_log {dir}/error.log;\n\
         events {{ worker_connections 256; }}\n\
         http {{\n    log_format connections '$connection';\n    access_log {dir}/access.log connections;\n    client_body_temp_path {dir}/body;\n    proxy_temp_path {dir}/proxy;\n\
             fastcgi_temp_path {dir}/fastcgi;\n    uwsgi_temp_path {dir}/uwsgi;\n    scgi_temp_path {dir}/scgi;\n\
             server {{\n        listen {addr} ssl;\n        ssl_certificate {};\n        ssl_certificate_key {};\n        {verify}\n\
                 location / {{\n            proxy_pass http://{upstream};\n            proxy_http_version 1.1;\n\
                     proxy_set_header Connection \"\";\n            proxy_buffering off;\n            proxy_read_timeout 1h;\n        }}\n    }}\n}}\n",
        file(&format!("{leaf}.pem")),
        file(&format!("{leaf}-key.pem")),
    )
}

pub const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}"#;

/// `curl` POSTing an `initialize` to `url` with `args` (its TLS options), bounded.
pub async fn curl_initialize(url: &str, args: &[&str]) -> Output {
    curl_post(url, INITIALIZE, args).await
}

/// `curl` POSTing `body` to `url` with `args` (TLS options, headers), bounded.
pub async fn curl_post(url: &str, body: &str, args: &[&str]) -> Output {
    let command = tokio::process::Command::new("curl")
        .args(["-s", "-S", "-i", "--max-time", "10", url])
        .args(["-H", "content-type: application/json"])
        .args(["-H", "accept: application/json, text/event-stream"])
        .args(["-d", body])
        .args(args)
        .kill_on_drop(true)
        .output();
    crate::harness::within("curl", command)
        .await
        .expect("curl runs")
}

/// The `Mcp-Session-Id` of an answer curl printed with `-i`.
pub fn session_of(answer: &str) -> String {
    answer
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("mcp-session-id")
                .then(|| value.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("a session: {answer}"))
}

//! Command-line entry: parse options, load configuration, run until SIGINT or SIGTERM.

use mcp_session_proxy::config::{Cli, Command, Config, ExposedSecret, LogFormat};
use mcp_session_proxy::front::access;
use mcp_session_proxy::upstream::sandbox;
use mcp_session_proxy::{demo, health_probe, server, telemetry::logs};
use tracing_subscriber::EnvFilter;

fn main() -> std::process::ExitCode {
    // The launcher of a stdio server (its parent, and the step that confines itself and
    // becomes the server).
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(code) = sandbox::run_subcommand(&args) {
        return code;
    }
    // First, before a secret is read or a thread started: a process of the same user (a stdio
    // child, whatever it runs) cannot read a non-dumpable process's /proc/<pid>/environ or its
    // memory, nor attach to it, and no core dump holds its secrets. Root and CAP_SYS_PTRACE
    // still can. A child's execve makes it dumpable again, for itself.
    let undumpable = nix::sys::prctl::set_dumpable(false);
    // What the log gathered goes out before a panic's message, and at exit.
    let report_panic = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |panic| {
        logs::flush_before_panic();
        report_panic(panic);
    }));
    let outcome = run_cli(undumpable);
    logs::flush();
    match outcome {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // One line with every cause, each once: `upstream.stdio: the command `x` was not
            // found (…)`.
            let said = mcp_session_proxy::base::error_chain::error_chain(error.as_ref());
            eprintln!("mcp-session-proxy: {said}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run_cli(undumpable: nix::Result<()>) -> anyhow::Result<()> {
    let (cli, exposed) = Cli::parse_noting_exposed_secrets();
    match cli.command {
        Some(Command::DemoServer {
            protocol: mcp_session_proxy::wire::era::Era::Auto,
            ..
        }) => anyhow::bail!("demo-server --protocol takes legacy or 2026-07-28"),
        Some(Command::DemoServer {
            http: None,
            protocol,
        }) => return runtime(0)?.block_on(demo::run(protocol)),
        Some(Command::DemoServer {
            http: Some(listen),
            protocol: mcp_session_proxy::wire::era::Era::Legacy,
        }) => return runtime(0)?.block_on(demo_over_http(listen)),
        Some(Command::DemoServer {
            http: Some(listen),
            protocol: mcp_session_proxy::wire::era::Era::Modern,
        }) => return runtime(0)?.block_on(modern_demo_over_http(listen)),
        Some(Command::Health {
            url,
            host,
            allowed_hosts,
            timeout,
        }) => {
            let host = host
                .as_deref()
                .or(health_probe::allowed_host(&allowed_hosts));
            let answer = runtime(1)?.block_on(health_probe::check(&url, host, timeout))?;
            println!("{answer}");
            return Ok(());
        }
        None => {}
    }
    let config = Config::load(&cli)?;
    mcp_session_proxy::base::memory::set_release(give_memory_back);
    let start = StartNotes {
        undumpable,
        exposed,
    };
    runtime(config.workers)?.block_on(run(config, start))
}

/// What start-up learned before the log was set up, said once it is.
struct StartNotes {
    undumpable: nix::Result<()>,
    exposed: Vec<ExposedSecret>,
}

impl StartNotes {
    fn log(&self) {
        match self.undumpable {
            Ok(()) => tracing::debug!(
                "not dumpable: processes of this user, the servers it starts included, cannot \
                 read its environment or memory"
            ),
            Err(error) => tracing::warn!(%error,
                "cannot make this process non-dumpable: processes of its user, the servers it \
                 starts included, can read its environment and memory in /proc"),
        }
        let pid = std::process::id();
        for secret in &self.exposed {
            tracing::warn!(
                option = secret.option,
                "a secret on the command line: every local user can read it in \
                 /proc/{pid}/cmdline; give it in {} instead",
                secret.instead
            );
        }
    }
}

/// glibc's allocator keeps the memory of freed sessions mapped (10,000 expired sessions left
/// ~30 MB resident; see RELIABILITY.md); `malloc_trim` hands its free pages back.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn give_memory_back() {
    extern "C" {
        fn malloc_trim(pad: usize) -> std::ffi::c_int;
    }
    // SAFETY: malloc_trim takes no pointers, has no preconditions and is thread-safe (glibc
    // takes each arena's lock).
    unsafe {
        malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn give_memory_back() {}

/// `workers` threads (0: one per CPU); one means a current-thread runtime, where no request
/// ever wakes another thread.
fn runtime(workers: usize) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = match workers {
        1 => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    if workers > 1 {
        builder.worker_threads(workers);
    }
    builder.enable_all().build()
}

async fn run(config: Config, start: StartNotes) -> anyhow::Result<()> {
    access::set_policy(config.access_log, config.access_log_sample);
    init_logging(config.log_format);
    start.log();
    // What proxies of this user that were killed left of their children's directories.
    sandbox::remove_stale_private_dirs();
    let running = server::start(&config).await?;
    let scheme = match config.tls.cert_file.is_some() {
        true => "https",
        false => "http",
    };
    let urls: Vec<String> = running
        .served()
        .into_iter()
        .map(|(path, name)| {
            let url = format!("{scheme}://{}{path}", running.addr);
            match name.and_then(|name| config.r#virtual.get(name)) {
                Some(composed) => format!("{url} (virtual: {})", composed.servers.join(", ")),
                None => url,
            }
        })
        .collect();
    let urls = urls.join(", ");
    match config.serves_default() {
        true => {
            let upstream = config.upstream_spec()?.display();
            tracing::info!(addr = %running.addr, %upstream, "listening on {urls}");
        }
        false => tracing::info!(addr = %running.addr, "listening on {urls}"),
    }
    wait_for_signal().await?;
    let written = mcp_session_proxy::base::clock::written;
    let (drain, timeout) = (
        written(config.drain_delay),
        written(config.shutdown_timeout),
    );
    tracing::info!(
        %drain,
        %timeout,
        "shutting down: unready for the drain delay while balancers notice, then no new \
         connection, requests in flight answered and sessions handed over or ended within the \
         timeout"
    );
    let bound = config.drain_delay + config.shutdown_timeout;
    if tokio::time::timeout(bound, running.stop()).await.is_err() {
        let timeout = written(bound);
        tracing::warn!(%timeout, "shutdown took too long; killing what is left");
    }
    sandbox::remove_own_private_dirs();
    tracing::info!("stopped");
    Ok(())
}

/// The demo over Streamable HTTP: this proxy's front in front of the stdio demo, i.e. a plain
/// HTTP MCP server whose sessions expire (404) like any other's.
async fn demo_over_http(listen: std::net::SocketAddr) -> anyhow::Result<()> {
    init_logging(LogFormat::Text);
    let mut config = Config {
        listen,
        // No balancer in front of the demo: nothing to wait for.
        drain_delay: std::time::Duration::ZERO,
        ..Config::default()
    };
    // A fixture for load: clients without credentials (every benchmark's) are not held to the
    // few hundred sessions a proxy in front of real servers allows them.
    config.session.max_sessions = 100_000;
    config.session.max_anonymous_sessions = 100_000;
    let running = server::start(&config).await?;
    println!("http://{}/mcp", running.addr);
    wait_for_signal().await?;
    running.stop().await;
    Ok(())
}

/// The 2026-07-28 demo over Streamable HTTP, served directly (no proxy, no sessions).
async fn modern_demo_over_http(listen: std::net::SocketAddr) -> anyhow::Result<()> {
    init_logging(LogFormat::Text);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("http://{}/mcp", listener.local_addr()?);
    tokio::select! {
        () = demo::serve_modern_over_http(listener) => Ok(()),
        stopped = wait_for_signal() => stopped,
    }
}

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // A line that cannot be written (standard error closed: the log reader went away) is lost;
    // it is never reported on standard error again, which would panic the task logging it.
    let builder = tracing_subscriber::fmt()
        .log_internal_errors(false)
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(logs::Stderr::batching(access::TARGET));
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

async fn wait_for_signal() -> anyhow::Result<()> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result?,
        _ = terminate.recv() => {}
    }
    Ok(())
}

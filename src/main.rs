//! Command-line entry: parse options, load configuration, run until SIGINT or SIGTERM.

use clap::Parser;
use mcp_session_proxy::config::{Cli, Command, Config, LogFormat};
use mcp_session_proxy::{demo, server};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if let Some(Command::DemoServer) = cli.command {
        return demo::run().await;
    }
    let config = Config::load(&cli)?;
    init_logging(config.log_format);
    let running = server::start(&config).await?;
    tracing::info!(addr = %running.addr, upstream = %config.stdio_spec()?.display(), "listening on http://{}/mcp", running.addr);
    wait_for_signal().await?;
    tracing::info!("shutting down");
    if tokio::time::timeout(config.shutdown_timeout, running.stop())
        .await
        .is_err()
    {
        tracing::warn!(timeout = ?config.shutdown_timeout, "shutdown took too long; killing what is left");
    }
    Ok(())
}

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
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

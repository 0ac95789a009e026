//! The `wasched` command line.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use wasched::config::{Config, DefaultPluginRuntime};
use wasched::{bench, input, simulate};

/// A Kubernetes-compatible scheduler whose placement policy runs as WebAssembly components.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Schedule the pending pods of a cluster dump and print where each goes, or why it cannot.
    Simulate {
        /// Scheduler configuration (TOML); without it, kube-scheduler's default profile.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Show every examined node: why it was ruled out, or its scores.
        #[arg(long)]
        explain: bool,
        #[arg(long, value_enum, default_value_t = simulate::Output::Json)]
        output: simulate::Output,
        /// Seed for breaking ties between equally good nodes.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Run the default plugins as WebAssembly components or natively (overrides the config).
        #[arg(long, value_enum)]
        runtime: Option<DefaultPluginRuntime>,
        /// YAML or JSON files of Nodes, Pods, PersistentVolumes, PersistentVolumeClaims and
        /// StorageClasses (`kubectl get nodes,pods,pv,pvc,storageclass -A -o yaml`).
        #[arg(required = true)]
        cluster: Vec<PathBuf>,
    },
    /// Schedule a synthetic cluster with the default plugins as WebAssembly and natively, and
    /// print throughput, latency and memory.
    Bench(bench::Args),
    /// Work with plugin components.
    #[command(subcommand)]
    Plugin(PluginCommand),
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Show a component's size, sha256, imports and exports, and whether this host accepts it as a
    /// plugin (and what it does).
    Inspect {
        /// The component file.
        component: PathBuf,
    },
    /// Turn a core WebAssembly module built with the SDK (`cargo build --target
    /// wasm32-unknown-unknown`) into a plugin component, and check this host accepts it.
    Encode {
        /// The module, e.g. target/wasm32-unknown-unknown/release/my_plugin.wasm.
        module: PathBuf,
        /// Where to write the component.
        #[arg(short, long)]
        output: PathBuf,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WASCHED_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "(none)".to_string()
    } else {
        items.join(", ")
    }
}

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Simulate {
            config,
            explain,
            output,
            seed,
            runtime,
            cluster,
        } => {
            let mut config = match &config {
                Some(path) => Config::load(path)?,
                None => Config::default(),
            };
            if let Some(runtime) = runtime {
                config.default_plugins = runtime;
            }
            let cluster = input::load_files(&cluster)?;
            if let Some(warning) = cluster.skipped_warning() {
                eprintln!("{warning}");
            }
            let options = simulate::Options {
                explain,
                output,
                seed,
            };
            let decisions = simulate::simulate(&config, &cluster, options)?;
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            simulate::print(&decisions, options, &mut out)?;
            out.flush()?;
            Ok(())
        }
        Command::Bench(args) => bench::run(&args),
        Command::Plugin(PluginCommand::Inspect { component }) => {
            let bytes = std::fs::read(&component)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", component.display()))?;
            let report = wasched::runtime::wasm::WasmRuntime::shared().inspect(&bytes);
            println!("file:     {}", component.display());
            println!("size:     {} bytes", report.size);
            println!("sha256:   {}", report.sha256);
            println!("imports:  {}", list_or_none(&report.imports));
            println!("exports:  {}", list_or_none(&report.exports));
            match &report.verdict {
                Ok(d) => {
                    let mut does = Vec::new();
                    if d.filter {
                        does.push("filter");
                    }
                    if d.score {
                        does.push("score");
                    }
                    println!("world:    wasched:plugin/plugin@0.1.0");
                    println!("plugin:   {} {} ({})", d.name, d.version, does.join(", "));
                    println!("accepted: yes");
                    Ok(())
                }
                Err(why) => {
                    println!("accepted: no: {why}");
                    anyhow::bail!("{} is not a plugin this host accepts", component.display())
                }
            }
        }
        Command::Plugin(PluginCommand::Encode { module, output }) => {
            let bytes = std::fs::read(&module)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", module.display()))?;
            let component = wit_component::ComponentEncoder::default()
                .module(&bytes)
                .and_then(|encoder| encoder.validate(true).encode())
                .map_err(|e| {
                    anyhow::anyhow!("{}: cannot make a component: {e:#}", module.display())
                })?;
            let name = module
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            wasched::runtime::wasm::WasmRuntime::shared().load(
                &name,
                &component,
                wasched::runtime::wasm::Limits::default(),
            )?;
            std::fs::write(&output, &component)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", output.display()))?;
            println!(
                "{}: {} bytes, sha256 {}",
                output.display(),
                component.len(),
                wasched::runtime::wasm::sha256_hex(&component)
            );
            Ok(())
        }
    }
}

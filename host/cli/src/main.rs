//! The `wasched` command line.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use wasched::config::{Config, DefaultPluginRuntime};
use wasched::server::client::{self, Client, Connection};
use wasched::server::{LogFormat, ServeArgs};
use wasched::{bench, diff, input, simulate};

mod shadow;

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
    /// Work with plugin components, locally or on a running server.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Replay a cluster trace (Alibaba GPU v2023 CSVs) in logical time and report placements,
    /// pending pods and why, latency, allocation and GPU fragmentation over time.
    Replay(wasched::replay::Args),
    /// Run the scheduler as a service: cluster API, admin API with hot plugin loads, watch and
    /// metrics, state kept in an embedded store.
    Serve(Box<ServeArgs>),
    /// Read or replace a running server's configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Create or replace Nodes, Pods, PersistentVolumes, PersistentVolumeClaims and StorageClasses
    /// on a running server, from YAML or JSON files.
    Apply {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        connection: Connection,
    },
    /// Schedule the same pending pods under two configurations and print which pods change node
    /// or Pending state, the FitError changes, and utilisation and fragmentation side by side.
    Diff {
        /// The two configurations, A then B (`default` for kube-scheduler's default profile).
        #[arg(long, num_args = 1, required = true)]
        config: Vec<String>,
        /// Exit with status 3 when a change of this kind is found (repeatable).
        #[arg(long, value_enum)]
        fail_on: Vec<diff::Change>,
        /// Print JSON instead of the report.
        #[arg(long)]
        json: bool,
        /// Seed for breaking ties between equally good nodes (the same for both).
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Run the default plugins as WebAssembly components or natively (both configurations).
        #[arg(long, value_enum)]
        runtime: Option<DefaultPluginRuntime>,
        /// Replay this trace (NODES.csv PODS.csv, as `wasched replay --nodes --pods` reads them)
        /// under both configurations instead of scheduling a cluster dump once.
        #[arg(long, num_args = 2, value_names = ["NODES", "PODS"], conflicts_with = "cluster")]
        trace: Option<Vec<PathBuf>>,
        /// With --trace: replay only its first N pods.
        #[arg(long, requires = "trace")]
        limit: Option<usize>,
        /// The cluster dump (as `simulate` reads it).
        #[arg(required_unless_present = "trace")]
        cluster: Vec<PathBuf>,
    },
    /// Run a candidate policy beside a live profile of a running server, read what it would
    /// have done differently, promote it or remove it.
    #[command(subcommand)]
    Shadow(shadow::ShadowCommand),
    /// List a running server's pods (with their node, or why they are pending) or nodes.
    Get {
        #[arg(value_enum)]
        resource: Resource,
        /// Only this namespace (pods).
        #[arg(short, long)]
        namespace: Option<String>,
        #[command(flatten)]
        connection: Connection,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Resource {
    Pods,
    Nodes,
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate a TOML configuration on the server and switch to it at the next cycle boundary.
    Apply {
        file: PathBuf,
        #[command(flatten)]
        connection: Connection,
    },
    /// Print the server's active configuration.
    Show {
        #[command(flatten)]
        connection: Connection,
    },
    /// Load a configuration (TOML or a KubeSchedulerConfiguration) with every plugin it names
    /// and print the profiles as they resolve: the plugins at each extension point in order,
    /// with weights and args.
    Check { file: PathBuf },
    /// Print the TOML a KubeSchedulerConfiguration amounts to (what it warns about on stderr).
    Convert { file: PathBuf },
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Show a component's size, sha256, imports and exports, and whether this host accepts it as a
    /// plugin (and what it does).
    Inspect {
        /// The component file.
        component: PathBuf,
    },
    /// Build a plugin folder (a Rust crate using the SDK) into a component and check this host
    /// accepts it.
    Build {
        /// The plugin's folder.
        #[arg(default_value = ".")]
        path: PathBuf,
        /// Where to write the component (default: <cargo target dir>/plugins/<crate>.wasm).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Upload a component to a running server (or replace the plugin of that name); profiles that
    /// use the name switch to it at the next cycle boundary.
    Load {
        /// The name profiles refer to it by.
        name: String,
        /// The component file.
        component: PathBuf,
        /// Refuse the upload unless the file has this sha256.
        #[arg(long)]
        sha256: Option<String>,
        #[command(flatten)]
        connection: Connection,
    },
    /// List a running server's plugins with their use, calls, errors and p99 time.
    List {
        #[command(flatten)]
        connection: Connection,
    },
    /// Remove an uploaded plugin from a running server (refused while a profile uses it).
    Remove {
        name: String,
        #[command(flatten)]
        connection: Connection,
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
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let (Command::Serve(args), Some(("serve", serve))) = (&mut cli.command, matches.subcommand())
    {
        // The flags given win over the same settings in a KubeSchedulerConfiguration file.
        let given = serve.ids().map(|id| id.as_str());
        let given = given.filter(|id| serve.value_source(id) == Some(ValueSource::CommandLine));
        args.given_flags = given.map(str::to_string).collect();
    }
    // A server logs what it does; one-shot commands only warn.
    let (default_level, json) = match &cli.command {
        Command::Serve(args) => ("info", args.log_format == LogFormat::Json),
        _ => ("warn", false),
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("WASCHED_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    // Colour codes only where a person reads them: a log file or collector gets plain text.
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    if json {
        logs.json().init();
    } else {
        logs.init();
    }
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
        } => simulate_files(
            config.as_deref(),
            runtime,
            &cluster,
            simulate::Options {
                explain,
                output,
                seed,
            },
        ),
        Command::Bench(args) => bench::run(&args),
        Command::Serve(args) => wasched::server::serve(*args),
        Command::Replay(args) => replay(&args),
        Command::Apply { files, connection } => {
            print!("{}", client::apply(&Client::new(&connection)?, &files)?);
            Ok(())
        }
        Command::Get {
            resource,
            namespace,
            connection,
        } => {
            let client = Client::new(&connection)?;
            let table = match resource {
                Resource::Pods => client::get_pods(&client, namespace.as_deref())?,
                Resource::Nodes => client::get_nodes(&client)?,
            };
            print!("{table}");
            Ok(())
        }
        Command::Config(command) => config_command(command),
        Command::Plugin(command) => plugin_command(command),
        Command::Shadow(command) => shadow::run(command),
        Command::Diff {
            config,
            fail_on,
            json,
            seed,
            runtime,
            trace,
            limit,
            cluster,
        } => {
            let input = match trace {
                Some(files) => DiffInput::Trace(files, limit),
                None => DiffInput::Cluster(cluster),
            };
            diff_files(&config, &fail_on, json, seed, runtime, input)
        }
    }
}

/// Exit status of `wasched diff` when a change `--fail-on` names was found (1 is an error, 2
/// a usage error).
const DIFF_FOUND: u8 = 3;

/// What `wasched diff` schedules: a cluster dump, or a trace (its two files, and how many of
/// its pods).
enum DiffInput {
    Cluster(Vec<PathBuf>),
    Trace(Vec<PathBuf>, Option<usize>),
}

/// `wasched diff`.
fn diff_files(
    configs: &[String],
    fail_on: &[diff::Change],
    json: bool,
    seed: u64,
    runtime: Option<DefaultPluginRuntime>,
    input: DiffInput,
) -> anyhow::Result<()> {
    let [a, b] = configs else {
        anyhow::bail!(
            "diff compares two configurations: give --config twice (`--config default` for kube-scheduler's default profile)"
        );
    };
    let load = |name: &String| -> anyhow::Result<Config> {
        let mut config = match name.as_str() {
            "default" => Config::default(),
            path => Config::load(Path::new(path))?,
        };
        if let Some(runtime) = runtime {
            config.default_plugins = runtime;
        }
        Ok(config)
    };
    let found = match input {
        DiffInput::Cluster(files) => {
            let (config_a, config_b) = (load(a)?, load(b)?);
            let cluster = input::load_files(&files)?;
            diff::diff([(a, &config_a), (b, &config_b)], &cluster, seed)?
        }
        DiffInput::Trace(files, limit) => {
            let runs = wasched::replay::run(&wasched::replay::Args {
                nodes: files[0].clone(),
                pods: files[1].clone(),
                config: None,
                runtime,
                seed,
                limit,
                samples: 200,
                ignore_deletions: false,
                compare: Some(vec![PathBuf::from(a), PathBuf::from(b)]),
                speed: None,
                as_fast_as_possible: true,
                gpus: wasched::replay::GpuRequests::ExtendedResources,
                out: None,
            })?;
            diff::diff_replays(&runs[0], &runs[1])
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&found)?);
    } else {
        print!("{}", found.text());
    }
    std::io::stdout().flush()?;
    let failing: Vec<&diff::Change> = fail_on.iter().filter(|c| found.has(**c)).collect();
    if !failing.is_empty() {
        eprintln!("changes found: {failing:?}");
        std::process::exit(DIFF_FOUND.into());
    }
    Ok(())
}

/// `wasched config ...`.
fn config_command(command: ConfigCommand) -> anyhow::Result<()> {
    match command {
        ConfigCommand::Apply { file, connection } => {
            let text = std::fs::read(&file)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?;
            Client::new(&connection)?
                .request("PUT", "/admin/config", Some(("application/toml", text)))?
                .ok_json()?;
            println!("configuration {} applied", file.display());
            Ok(())
        }
        ConfigCommand::Check { file } => config_check(&file),
        ConfigCommand::Convert { file } => config_convert(&file),
        ConfigCommand::Show { connection } => {
            let reply = Client::new(&connection)?.request("GET", "/admin/config", None)?;
            if !(200..300).contains(&reply.status) {
                reply.ok_json()?;
            } else {
                print!("{}", reply.body);
            }
            Ok(())
        }
    }
}

/// `wasched plugin ...`.
fn plugin_command(command: PluginCommand) -> anyhow::Result<()> {
    match command {
        PluginCommand::Load {
            name,
            component,
            sha256,
            connection,
        } => {
            let client = Client::new(&connection)?;
            println!(
                "{}",
                client::plugin_load(&client, &name, &component, sha256.as_deref())?
            );
            Ok(())
        }
        PluginCommand::Build { path, output } => {
            let built = wasched::plugin_build::build(&path, output.as_deref())?;
            println!(
                "{}: {} bytes, sha256 {}",
                built.component.display(),
                built.size,
                built.sha256
            );
            Ok(())
        }
        PluginCommand::List { connection } => {
            print!("{}", client::plugin_list(&Client::new(&connection)?)?);
            Ok(())
        }
        PluginCommand::Remove { name, connection } => {
            Client::new(&connection)?
                .request("DELETE", &format!("/admin/plugins/{name}"), None)?
                .ok_json()?;
            println!("plugin {name} removed");
            Ok(())
        }
        PluginCommand::Inspect { component } => inspect(&component),
        PluginCommand::Encode { module, output } => encode(&module, &output),
    }
}

/// `wasched simulate`.
fn simulate_files(
    config: Option<&Path>,
    runtime: Option<DefaultPluginRuntime>,
    cluster: &[PathBuf],
    options: simulate::Options,
) -> anyhow::Result<()> {
    let mut config = match config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if let Some(runtime) = runtime {
        config.default_plugins = runtime;
    }
    let cluster = input::load_files_compact(cluster)?;
    for warning in [cluster.empty_files_warning(), cluster.skipped_warning()]
        .into_iter()
        .flatten()
    {
        eprintln!("{warning}");
    }
    let (decisions, _) = simulate::simulate_owned(&config, cluster, options)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    simulate::print(&decisions, options, &mut out)?;
    out.flush()?;
    Ok(())
}

/// `wasched replay`.
fn replay(args: &wasched::replay::Args) -> anyhow::Result<()> {
    let runs = wasched::replay::run(args)?;
    // The series and the histogram go to --out; the terminal gets the series' last point.
    let mut printed = Vec::new();
    for mut run in runs {
        let series = std::mem::take(&mut run.summary.series);
        run.summary.latency_histogram.clear();
        let mut json = serde_json::to_value(&run)?;
        json["summary"]["series"] = serde_json::json!(series.last());
        if let Some(map) = json["summary"].as_object_mut() {
            map.remove("latency_histogram");
        }
        printed.push(json);
    }
    let json = if printed.len() > 1 {
        serde_json::json!({ "runs": printed })
    } else {
        printed.swap_remove(0)["summary"].take()
    };
    println!("{}", serde_json::to_string_pretty(&json)?);
    if let Some(dir) = &args.out {
        eprintln!("report: {}", dir.join("report.html").display());
    }
    Ok(())
}

/// `wasched plugin inspect`.
fn inspect(component: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(component)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", component.display()))?;
    let report = wasched::component::WasmRuntime::shared().inspect(&bytes);
    println!("file:     {}", component.display());
    println!("size:     {} bytes", report.size);
    println!("sha256:   {}", report.sha256);
    println!(
        "language: {}",
        wasched::language::language(&bytes).unwrap_or_else(|| "unknown".into())
    );
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
            if d.pre_enqueue {
                does.push("pre-enqueue");
            }
            if d.reserve {
                does.push("reserve");
            }
            if d.permit {
                does.push("permit");
            }
            println!("world:    {}", report.world);
            println!("plugin:   {} {} ({})", d.name, d.version, does.join(", "));
            if d.score {
                println!("normalize: {}", normalize_kind(d.normalize));
            }
            let parts = d.reads_pod.names();
            let mut reads = vec![if parts.is_empty() {
                "no part of the pod".to_string()
            } else {
                format!("pod {}", parts.join(", "))
            }];
            if d.reads_usage {
                reads.push("node usage".to_string());
            }
            let existing = d.reads_existing_pods.names();
            if !existing.is_empty() {
                reads.push(format!("existing pods' {}", existing.join(", ")));
            }
            if d.reads_namespaces {
                reads.push("namespaces".to_string());
            }
            if d.reads_volumes {
                reads.push("persistent volumes".to_string());
            }
            println!("reads:    {}", reads.join("; "));
            println!("accepted: yes");
            Ok(())
        }
        Err(why) => {
            println!("accepted: no: {why}");
            anyhow::bail!("{} is not a plugin this host accepts", component.display())
        }
    }
}

/// `config convert`: the TOML a KubeSchedulerConfiguration amounts to, its warnings on stderr.
fn config_convert(file: &std::path::Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?;
    if !wasched::kube_config::is_kube_scheduler_configuration(&text) {
        anyhow::bail!(
            "{} is not a KubeSchedulerConfiguration (apiVersion {}, kind {})",
            file.display(),
            wasched::kube_config::API_VERSION,
            wasched::kube_config::KIND
        );
    }
    let converted = wasched::kube_config::to_toml(&text).map_err(|e| match e.line {
        Some(line) => anyhow::anyhow!("{}:{line}: {}", file.display(), e.message),
        None => anyhow::anyhow!("{}: {}", file.display(), e.message),
    })?;
    for warning in &converted.warnings {
        eprintln!("warning: {warning}");
    }
    print!("{}", converted.toml);
    Ok(())
}

/// `config check`: loads every plugin of the configuration and prints each profile's chains.
fn config_check(file: &std::path::Path) -> anyhow::Result<()> {
    let config = wasched::config::Config::load(file)?;
    let profiles = config.profiles()?;
    let list = |names: &[String]| match names.is_empty() {
        true => "-".to_string(),
        false => names.join(", "),
    };
    for chain in profiles.iter().map(wasched::config::ProfileChain::of) {
        let percentage = chain
            .percentage_of_nodes_to_score
            .filter(|p| *p != 0)
            .map_or("adaptive".to_string(), |p| format!("{p}%"));
        println!(
            "profile {} (nodes to score: {percentage})",
            chain.scheduler_name
        );
        println!("  preEnqueue: {}", list(&chain.pre_enqueue));
        println!("  filter:     {}", list(&chain.filters));
        let scores: Vec<String> = chain
            .scores
            .iter()
            .map(|s| format!("{} ({})", s.plugin, s.weight))
            .collect();
        println!("  score:      {}", list(&scores));
        println!("  permit:     {}", list(&chain.permit));
        for (plugin, args) in &chain.args {
            println!("  args {plugin}: {args}");
        }
    }
    // The warnings of a KubeSchedulerConfiguration were logged as it was read.
    Ok(())
}

/// A descriptor's `normalize`, as the WIT names it.
fn normalize_kind(kind: wasched_sdk::Normalize) -> &'static str {
    match kind {
        wasched_sdk::Normalize::None => "none",
        wasched_sdk::Normalize::Scale => "scale",
        wasched_sdk::Normalize::Reverse => "reverse",
        wasched_sdk::Normalize::Custom => "custom",
        wasched_sdk::Normalize::InScore => "in-score",
    }
}

/// `wasched plugin encode`.
fn encode(module: &Path, output: &Path) -> anyhow::Result<()> {
    let component = wasched::plugin_build::encode_module(module)?;
    std::fs::write(output, &component)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", output.display()))?;
    println!(
        "{}: {} bytes, sha256 {}",
        output.display(),
        component.len(),
        wasched::component::sha256_hex(&component)
    );
    Ok(())
}

//! `deploy/kubernetes`: what kustomize builds of the base (three replicas on Redis), the
//! external-Redis, managed-Redis and TLS overlays and the sidecar example, held to the proxy it
//! runs. Each is built by the real `kubectl kustomize` and read back as JSON (`kubectl annotate
//! --local` converts offline, with no cluster); each proxy container's command line and mounted
//! `proxy.toml` are loaded as the pod would load them (`Config::load`, every key validated, the
//! pod's values put in for `$(POD_IP)` and the like, certificates made here for a mounted
//! Secret's); then its ports, probes, Host names, secret, stop time and security context are
//! checked against that configuration.
//!
//! kubectl must be installed: scripts/test installs Debian's `kubernetes-client` where it is
//! missing, and without it these tests fail, saying so.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use clap::Parser;
use mcp_session_proxy::base::ids::MAX_NODE_NAME;
use mcp_session_proxy::config::{Cli, Config};
use mcp_session_proxy::front::guard::host_allowed;
use serde_json::Value;

use crate::harness::repo_root;
use crate::harness::tls::Certificates;

/// The port the image listens on (docker/Dockerfile) and every manifest names.
const PORT: u16 = 8787;
/// The image's user (docker/Dockerfile).
const IMAGE_UID: u64 = 10001;
/// What the test puts in for the pod's IP and the cluster secret.
const POD_IP: &str = "10.1.2.3";
const TEST_SECRET: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
/// What Kubernetes adds to a Deployment's name to name its pods, at most: `-`, the pod
/// template's hash (up to 10 characters), `-`, 5 random characters.
const POD_NAME_SUFFIX: &str = "-0123456789-abcde";

const NO_KUBECTL: &str = "kubectl is not installed: these tests build deploy/kubernetes with \
    `kubectl kustomize`. Run scripts/test, which installs it (Debian's kubernetes-client), or \
    install kubectl yourself";

/// `kubectl` with no cluster configuration of the user's (nothing here talks to a cluster).
fn kubectl() -> Command {
    let mut command = Command::new("kubectl");
    command.env(
        "KUBECONFIG",
        std::env::temp_dir().join("mcp-session-proxy-tests-no-kubeconfig"),
    );
    command
}

/// The objects `kubectl kustomize deploy/kubernetes/<dir>` makes, as JSON.
fn build(dir: &str) -> Vec<Value> {
    let path = repo_root().join("deploy/kubernetes").join(dir);
    let built = match kubectl().arg("kustomize").arg(&path).output() {
        Ok(output) => output,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => panic!("{NO_KUBECTL}"),
        Err(error) => panic!("kubectl: {error}"),
    };
    assert!(
        built.status.success(),
        "kubectl kustomize {}: {}",
        path.display(),
        String::from_utf8_lossy(&built.stderr)
    );
    // Removing an annotation nobody set changes nothing but the format: YAML in, JSON out.
    let mut convert = kubectl()
        .args(["annotate", "--local", "-f", "-", "-o", "json"])
        .arg("mcp-session-proxy.test/none-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    let mut stdin = convert.stdin.take().unwrap();
    let yaml = built.stdout;
    let writer = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &yaml));
    let converted = convert.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(
        converted.status.success(),
        "kubectl annotate --local: {}",
        String::from_utf8_lossy(&converted.stderr)
    );
    let mut objects = Vec::new();
    for object in serde_json::Deserializer::from_slice(&converted.stdout).into_iter::<Value>() {
        let object = object.expect("kubectl prints JSON");
        match object["kind"].as_str() {
            Some("List") => objects.extend(object["items"].as_array().unwrap().iter().cloned()),
            _ => objects.push(object),
        }
    }
    assert!(!objects.is_empty(), "{dir} builds nothing");
    objects
}

fn all<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

/// The one object of `kind` named `name`.
fn named<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    let found: Vec<&Value> = all(objects, kind)
        .into_iter()
        .filter(|o| o["metadata"]["name"] == name)
        .collect();
    assert_eq!(found.len(), 1, "one {kind} {name}");
    found[0]
}

/// The container named `proxy` of a workload's pod.
fn proxy_container(workload: &Value) -> &Value {
    workload["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "proxy")
        .expect("a container named proxy")
}

fn text(value: &Value) -> &str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("a string: {value}"))
}

/// A container's port: a number, or the name of one of its ports.
fn port_of(container: &Value, port: &Value) -> u16 {
    match port {
        Value::Number(number) => number.as_u64().unwrap() as u16,
        Value::String(name) => {
            let ports = container["ports"].as_array().unwrap();
            let port = ports
                .iter()
                .find(|p| p["name"] == name.as_str())
                .unwrap_or_else(|| panic!("a port named {name}"));
            port["containerPort"].as_u64().unwrap() as u16
        }
        other => panic!("a port: {other}"),
    }
}

/// Whether `selector` (matchLabels, or a Service's selector) picks pods labelled `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let selector = selector.as_object().unwrap();
    !selector.is_empty() && selector.iter().all(|(k, v)| labels[k] == *v)
}

/// What the test puts in for a Secret's key: the same for the same Secret and key, at least 32
/// characters, letters, digits and '-' (a cluster secret, a password in a URL).
fn test_secret(reference: &Value) -> String {
    format!(
        "{TEST_SECRET}-{}-{}",
        text(&reference["name"]),
        text(&reference["key"])
    )
}

/// `value` with the `$(NAME)` of `values` put in, as Kubernetes does in env values, commands
/// and args.
fn expanded(value: &str, values: &BTreeMap<String, String>) -> String {
    let mut value = value.to_owned();
    for (name, defined) in values {
        value = value.replace(name, defined);
    }
    value
}

/// The variables of a container that hold a secret: from a Secret, or made of one (`$(NAME)`
/// of an earlier such variable in its value).
fn secret_variables(container: &Value) -> Vec<String> {
    let mut secret = Vec::new();
    for variable in container["env"].as_array().into_iter().flatten() {
        let name = text(&variable["name"]);
        let from_secret = variable["valueFrom"]["secretKeyRef"].is_object();
        let made_of_one = variable["value"]
            .as_str()
            .is_some_and(|value| secret.iter().any(|s| value.contains(&format!("$({s})"))));
        if from_secret || made_of_one {
            secret.push(name.to_owned());
        }
    }
    secret
}

/// No container's command line holds a secret, which every process of its pod could read
/// (`/proc/<pid>/cmdline`): no value of a Secret of the build, no `$(NAME)` of a variable that
/// holds one.
fn check_no_secret_on_a_command_line(objects: &[Value]) {
    use base64::Engine;
    let values: Vec<String> = all(objects, "Secret")
        .iter()
        .flat_map(|secret| secret["data"].as_object().cloned().unwrap_or_default())
        .map(|(_, value)| {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text(&value))
                .expect("Secret data is base64");
            String::from_utf8(bytes).unwrap()
        })
        .collect();
    let mut checked = 0;
    for workload in objects
        .iter()
        .filter(|o| o["kind"] == "Deployment" || o["kind"] == "StatefulSet")
    {
        for container in workload["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
        {
            let what = format!(
                "{}/{}",
                text(&workload["metadata"]["name"]),
                text(&container["name"])
            );
            let secret = secret_variables(container);
            let words = [&container["command"], &container["args"]]
                .into_iter()
                .filter_map(Value::as_array)
                .flatten()
                .map(text);
            for word in words {
                for name in &secret {
                    assert!(
                        !word.contains(&format!("$({name})")),
                        "{what}: the secret {name} on the command line: {word}"
                    );
                }
                for value in &values {
                    assert!(
                        !word.contains(value.as_str()),
                        "{what}: a Secret's value in {word}"
                    );
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 0);
}

/// The store's password comes from a Secret built with it: the reference it is read from.
fn check_store_password(objects: &[Value], deployment: &Value, config: &Config) -> Value {
    let container = proxy_container(deployment);
    let env = container["env"].as_array().unwrap();
    let Some(password) = mcp_session_proxy::telemetry::redact::url_password(&config.store) else {
        // Given apart from the URL: --store-password-env names a variable of a Secret's.
        let args: Vec<&str> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(text)
            .collect();
        let at = args
            .iter()
            .position(|a| *a == "--store-password-env")
            .unwrap_or_else(|| panic!("the store takes a password: {}", config.store));
        let variable = env
            .iter()
            .find(|variable| variable["name"] == args[at + 1])
            .expect("the password's variable is the pod's");
        let reference = variable["valueFrom"]["secretKeyRef"].clone();
        assert!(
            reference.is_object(),
            "the store's password is a Secret's: {variable}"
        );
        let secret = all(objects, "Secret")
            .into_iter()
            .find(|s| s["metadata"]["name"] == reference["name"])
            .expect("the Secret it names is built with it");
        assert!(secret["data"][text(&reference["key"])].is_string());
        return reference;
    };
    let reference = env
        .iter()
        .map(|variable| &variable["valueFrom"]["secretKeyRef"])
        .find(|reference| reference.is_object() && test_secret(reference) == password)
        .expect("the store's password is a Secret's")
        .clone();
    let secret = all(objects, "Secret")
        .into_iter()
        .find(|s| s["metadata"]["name"] == reference["name"])
        .expect("the Secret it names is built with it");
    assert!(secret["data"][text(&reference["key"])].is_string());
    reference
}

/// A proxy container as its pod runs it: the configuration it loads, and where from.
struct Proxy<'a> {
    pod: &'a Value,
    container: &'a Value,
    config: Config,
    /// The mounted proxy.toml, as written.
    file: toml::Table,
}

/// The proxy container of a Deployment's pod: its command line with the pod's values put in,
/// its config file from the ConfigMap it mounts, loaded and validated by the proxy's own code.
fn proxy_of<'a>(objects: &'a [Value], deployment: &'a Value) -> Proxy<'a> {
    let pod = &deployment["spec"]["template"]["spec"];
    let container = proxy_container(deployment);
    assert!(text(&container["image"]).starts_with("mcp-session-proxy:"));
    let pod_name = format!("{}{POD_NAME_SUFFIX}", text(&deployment["metadata"]["name"]));
    let env = container["env"].as_array().cloned().unwrap_or_default();
    let mut values = BTreeMap::new();
    let mut args = vec!["mcp-session-proxy".to_owned()];
    for variable in &env {
        let name = text(&variable["name"]);
        let from = &variable["valueFrom"];
        let value = if let Some(value) = variable["value"].as_str() {
            value.to_owned()
        } else if from["fieldRef"]["fieldPath"] == "status.podIP" {
            POD_IP.to_owned()
        } else if from["fieldRef"]["fieldPath"] == "metadata.name" {
            pod_name.clone()
        } else if from["secretKeyRef"].is_object() {
            test_secret(&from["secretKeyRef"])
        } else {
            panic!("{name}: from where? {variable}")
        };
        // Kubernetes puts in the variables defined before this one.
        let value = expanded(&value, &values);
        // What the proxy reads from its environment, given as the flags it stands for (the
        // test's own environment is not the pod's).
        match name {
            "MCP_PROXY_CLUSTER_SECRET" => args.extend(["--cluster-secret".into(), value.clone()]),
            "MCP_PROXY_ALLOWED_HOSTS" => args.extend(["--allowed-host".into(), value.clone()]),
            "MCP_PROXY_STORE" => args.extend(["--store".into(), value.clone()]),
            _ => {}
        }
        if name.starts_with("MCP_PROXY_") {
            assert!(
                !value.contains("$("),
                "{name}={value}: a variable not defined before it"
            );
        }
        values.insert(format!("$({name})"), value);
    }

    // The config file: the ConfigMap mounted at --config's folder, written out for the proxy.
    let written: Vec<String> = container["args"]
        .as_array()
        .expect("the proxy's options are args, after the image's entrypoint")
        .iter()
        .map(|a| text(a).to_owned())
        .collect();
    assert!(
        !written.iter().any(|a| a.starts_with("--cluster-secret")),
        "the cluster secret on the command line: {written:?}"
    );
    let at = written
        .iter()
        .position(|a| a == "--config")
        .expect("--config");
    let config_path = Path::new(&written[at + 1]);
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| Path::new(text(&m["mountPath"])) == config_path.parent().unwrap())
        .expect("the config file's folder is mounted");
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    let config_map = all(objects, "ConfigMap")
        .into_iter()
        .find(|c| c["metadata"]["name"] == volume["configMap"]["name"])
        .expect("the ConfigMap it mounts is built with it");
    let file_name = config_path.file_name().unwrap().to_str().unwrap();
    let contents = text(&config_map["data"][file_name]);
    let file: toml::Table = toml::from_str(contents).expect("proxy.toml is TOML");
    // One file per load: the tests run side by side, and builds share ConfigMaps.
    static LOADS: AtomicUsize = AtomicUsize::new(0);
    let local = std::env::temp_dir().join(format!(
        "mcp-session-proxy-kubernetes-{}-{}-{}.toml",
        std::process::id(),
        LOADS.fetch_add(1, Ordering::Relaxed),
        text(&config_map["metadata"]["name"])
    ));
    std::fs::write(&local, contents).unwrap();

    // Files of mounted Secrets (a certificate, its key and CA, as cert-manager writes them):
    // certificates made here, in their place.
    let secret_mounts: Vec<&str> = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|mount| {
            pod["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v["name"] == mount["name"] && v["secret"].is_object())
        })
        .map(|mount| text(&mount["mountPath"]))
        .collect();
    let certificates = (!secret_mounts.is_empty()).then(Certificates::make);
    // A secret read from a variable of the pod's (`--store-password-env NAME`) is given to the
    // proxy here as a file holding that variable's value: the test's environment is not the
    // pod's.
    let secret_file = std::env::temp_dir().join(format!(
        "mcp-session-proxy-kubernetes-{}-{}.secret",
        std::process::id(),
        LOADS.fetch_add(1, Ordering::Relaxed)
    ));
    for (i, arg) in written.iter().enumerate() {
        if i == at + 1 {
            args.push(local.to_str().unwrap().to_owned());
            continue;
        }
        if arg == "--store-password-env" {
            args.push("--store-password-file".into());
            continue;
        }
        if i > 0 && written[i - 1] == "--store-password-env" {
            let value = values
                .get(&format!("$({arg})"))
                .unwrap_or_else(|| panic!("--store-password-env {arg}: not a variable of the pod"));
            std::fs::write(&secret_file, value).unwrap();
            args.push(secret_file.to_str().unwrap().to_owned());
            continue;
        }
        let mut arg = arg.clone();
        for (name, value) in &values {
            arg = arg.replace(name, value);
        }
        if let Some(certificates) = &certificates {
            arg = in_place_of_a_mounted_secret(&arg, &secret_mounts, certificates);
        }
        assert!(
            !arg.contains("$("),
            "{arg}: a variable the container does not define"
        );
        args.push(arg);
    }
    let cli = Cli::try_parse_from(&args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
    let loaded = Config::load(&cli);
    std::fs::remove_file(&local).unwrap();
    let _ = std::fs::remove_file(&secret_file);
    let config = loaded.unwrap_or_else(|e| panic!("the pod's proxy would not start: {e:#}"));
    Proxy {
        pod,
        container,
        config,
        file,
    }
}

/// `arg`, a file of a Secret mounted at one of `mounts` (`tls.crt`, `tls.key`, `ca.crt`),
/// as the path of a certificate made for the test: one for both server and client use, its
/// key, its CA.
fn in_place_of_a_mounted_secret(arg: &str, mounts: &[&str], certificates: &Certificates) -> String {
    let Some(file) = mounts
        .iter()
        .find_map(|mount| arg.strip_prefix(mount)?.strip_prefix('/'))
    else {
        return arg.to_owned();
    };
    let made = match file {
        "tls.crt" => "replica.pem",
        "tls.key" => "replica-key.pem",
        "ca.crt" => "ca.pem",
        other => panic!("{arg}: {other} is not a file cert-manager writes"),
    };
    certificates.path(made).to_str().unwrap().to_owned()
}

/// What every proxy pod must hold, whatever runs beside it.
fn check_proxy(objects: &[Value], deployment: &Value) -> Config {
    let proxy = proxy_of(objects, deployment);
    let (pod, container, config) = (proxy.pod, proxy.container, &proxy.config);

    // It listens on every interface, on the port the pod declares and the probes use.
    assert!(config.listen.ip().is_unspecified(), "{}", config.listen);
    assert_eq!(config.listen.port(), PORT);
    assert_eq!(port_of(container, &Value::from("http")), PORT);
    let settings = config.http_settings().unwrap();
    for (probe, path) in [
        ("startupProbe", "/healthz"),
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        assert_eq!(port_of(container, &get["port"]), PORT, "{probe}");
        // Over TLS where the listener speaks it.
        let scheme = get["scheme"].as_str().unwrap_or("HTTP");
        let tls = config.tls.cert_file.is_some();
        assert_eq!(scheme, if tls { "HTTPS" } else { "HTTP" }, "{probe}");
        // The kubelet sends the pod's IP as Host unless told otherwise; the proxy refuses a
        // Host it does not allow, on its health endpoints too.
        let host = get["httpHeaders"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|h| text(&h["name"]).eq_ignore_ascii_case("host"))
            .map(|h| text(&h["value"]).to_owned())
            .unwrap_or_else(|| format!("{POD_IP}:{PORT}"));
        assert!(
            host_allowed(&settings, &host),
            "{probe} sends Host {host}, which the proxy refuses (allowed: {:?})",
            config.http.allowed_hosts
        );
    }

    // The cluster secret comes from a Secret, never from the command line (see proxy_of) or
    // the file.
    assert!(
        proxy
            .file
            .get("cluster")
            .and_then(|c| c.get("secret"))
            .is_none(),
        "no secret in proxy.toml"
    );
    if config.store != "memory" {
        let variable = container["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == "MCP_PROXY_CLUSTER_SECRET")
            .expect("MCP_PROXY_CLUSTER_SECRET");
        assert!(variable.get("value").is_none(), "{variable}");
        let reference = &variable["valueFrom"]["secretKeyRef"];
        let secret = all(objects, "Secret")
            .into_iter()
            .find(|s| s["metadata"]["name"] == reference["name"])
            .expect("the Secret it names is built with it");
        assert!(secret["data"][text(&reference["key"])].is_string());
        // The other replicas reach this one at its own address, on the port it listens on.
        let scheme = match config.tls.cert_file {
            Some(_) => "https",
            None => "http",
        };
        assert_eq!(
            config.cluster.advertise,
            format!("{scheme}://{POD_IP}:{PORT}"),
            "--advertise: the pod's IP"
        );
        let longest_pod_name =
            format!("{}{POD_NAME_SUFFIX}", text(&deployment["metadata"]["name"]));
        assert_eq!(config.cluster.node_id, longest_pod_name, "--node-id");
        assert!(config.cluster.node_id.len() <= MAX_NODE_NAME);
    }

    // Stopping: the grace period covers the drain, the shutdown and any preStop hook.
    let drain = config.drain_delay;
    let pre_stop = pre_stop_sleep(container);
    let grace = Duration::from_secs(pod["terminationGracePeriodSeconds"].as_u64().unwrap());
    assert!(
        grace > pre_stop + drain + config.shutdown_timeout,
        "terminationGracePeriodSeconds {grace:?}: preStop {pre_stop:?} + drain {drain:?} + \
         shutdown_timeout {:?} and a margin",
        config.shutdown_timeout
    );

    // Resources named, so the scheduler and the autoscaler have figures to go by.
    let resources = &container["resources"];
    for figure in [
        &resources["requests"]["cpu"],
        &resources["requests"]["memory"],
        &resources["limits"]["memory"],
    ] {
        assert!(figure.is_string(), "{resources}");
    }
    assert!(pod["automountServiceAccountToken"] == false);
    proxy.config
}

/// The seconds of a `sleep N` preStop hook, if the container has one.
fn pre_stop_sleep(container: &Value) -> Duration {
    let command = &container["lifecycle"]["preStop"]["exec"]["command"];
    match command.as_array() {
        Some(words) if words.len() == 2 && words[0] == "sleep" => {
            Duration::from_secs(text(&words[1]).parse().unwrap())
        }
        Some(words) => panic!("a preStop hook other than `sleep N`: {words:?}"),
        None => Duration::ZERO,
    }
}

/// Every pod of the build runs unprivileged: not as root, no privilege escalation, no
/// capabilities, a read-only root file system, the runtime's seccomp profile.
fn check_security(objects: &[Value]) {
    let mut pods = 0;
    for workload in objects
        .iter()
        .filter(|o| o["kind"] == "Deployment" || o["kind"] == "StatefulSet")
    {
        let name = text(&workload["metadata"]["name"]);
        let pod = &workload["spec"]["template"]["spec"];
        let context = &pod["securityContext"];
        assert_eq!(context["runAsNonRoot"], true, "{name}");
        assert_ne!(context["runAsUser"], 0, "{name}");
        assert_eq!(
            context["seccompProfile"]["type"], "RuntimeDefault",
            "{name}"
        );
        for container in pod["containers"].as_array().unwrap() {
            let context = &container["securityContext"];
            let what = format!("{name}/{}", text(&container["name"]));
            assert_eq!(context["allowPrivilegeEscalation"], false, "{what}");
            assert_eq!(context["readOnlyRootFilesystem"], true, "{what}");
            assert_ne!(context["privileged"], true, "{what}");
            let dropped = context["capabilities"]["drop"].as_array();
            assert!(
                dropped.is_some_and(|d| d.iter().any(|c| c == "ALL")),
                "{what} drops every capability"
            );
            assert!(context["capabilities"]["add"].is_null(), "{what}");
            if text(&container["image"]).starts_with("mcp-session-proxy:") {
                assert_eq!(
                    context["runAsUser"]
                        .as_u64()
                        .or(pod["securityContext"]["runAsUser"].as_u64()),
                    Some(IMAGE_UID),
                    "{what}"
                );
            }
        }
        pods += 1;
    }
    assert!(pods > 0);
}

/// The Service that reaches `deployment`'s pods, on the proxy's port.
fn check_service(objects: &[Value], deployment: &Value) {
    let template = &deployment["spec"]["template"];
    let labels = &template["metadata"]["labels"];
    let services: Vec<&Value> = all(objects, "Service")
        .into_iter()
        .filter(|s| selects(&s["spec"]["selector"], labels))
        .collect();
    assert_eq!(services.len(), 1, "one Service for the proxy's pods");
    let port = &services[0]["spec"]["ports"][0];
    assert_eq!(port["name"], "http");
    assert_eq!(port["port"], PORT);
    assert_eq!(
        port_of(proxy_container(deployment), &port["targetPort"]),
        PORT
    );
}

/// The Redis of a store URL, as `(host, port)`.
fn redis_address(store: &str) -> (String, u16) {
    let rest = store.strip_prefix("redis://").expect("a redis:// URL");
    let authority = rest.split('/').next().unwrap();
    let authority = authority.rsplit('@').next().unwrap();
    let (host, port) = authority.rsplit_once(':').unwrap_or((authority, "6379"));
    (host.to_owned(), port.parse().unwrap())
}

#[test]
fn the_base_runs_three_replicas_on_its_redis_as_the_proxy_expects() {
    let objects = build("");
    let deployment = named(&objects, "Deployment", "mcp-proxy");
    assert_eq!(deployment["spec"]["replicas"], 3);
    let config = check_proxy(&objects, deployment);
    check_service(&objects, deployment);
    check_security(&objects);
    check_no_secret_on_a_command_line(&objects);
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];

    // The store is the Redis built with it: a Service in front of a StatefulSet with a volume.
    let (host, port) = redis_address(&config.store);
    let redis_service = named(&objects, "Service", &host);
    assert_eq!(redis_service["spec"]["ports"][0]["port"], port);
    let redis = named(&objects, "StatefulSet", "mcp-proxy-redis");
    assert!(selects(
        &redis_service["spec"]["selector"],
        &redis["spec"]["template"]["metadata"]["labels"]
    ));
    let redis_container = &redis["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        port_of(
            redis_container,
            &redis_service["spec"]["ports"][0]["targetPort"]
        ),
        port
    );
    // Redis requires a password, the one the replicas give it: the same Secret's.
    let given = check_store_password(&objects, deployment, &config);
    let required = redis_container["env"]
        .as_array()
        .expect("the password in Redis's environment")
        .iter()
        .map(|variable| &variable["valueFrom"]["secretKeyRef"])
        .find(|reference| reference.is_object())
        .expect("Redis's password from a Secret");
    assert_eq!(*required, given);
    let claims = redis["spec"]["volumeClaimTemplates"].as_array().unwrap();
    assert_eq!(claims.len(), 1);
    assert!(redis_container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["name"] == claims[0]["metadata"]["name"] && m["mountPath"] == "/data"));
    // Only the proxy's pods reach it.
    let policy = named(&objects, "NetworkPolicy", "mcp-proxy-redis");
    assert!(selects(
        &policy["spec"]["podSelector"]["matchLabels"],
        &redis["spec"]["template"]["metadata"]["labels"]
    ));
    assert!(selects(
        &policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"],
        labels
    ));

    // One replica out at a time for voluntary disruptions; autoscaled on CPU from three.
    let budget = named(&objects, "PodDisruptionBudget", "mcp-proxy");
    assert!(selects(&budget["spec"]["selector"]["matchLabels"], labels));
    assert!(budget["spec"]["maxUnavailable"] == 1 || budget["spec"]["minAvailable"] == 2);
    let autoscaler = named(&objects, "HorizontalPodAutoscaler", "mcp-proxy");
    assert_eq!(autoscaler["apiVersion"], "autoscaling/v2");
    assert_eq!(autoscaler["spec"]["scaleTargetRef"]["kind"], "Deployment");
    assert_eq!(autoscaler["spec"]["scaleTargetRef"]["name"], "mcp-proxy");
    assert_eq!(autoscaler["spec"]["minReplicas"], 3);
    assert_eq!(autoscaler["spec"]["metrics"][0]["resource"]["name"], "cpu");

    // Spread over nodes.
    let spread = &deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
        ["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"];
    assert_eq!(spread["topologyKey"], "kubernetes.io/hostname");
    assert!(selects(&spread["labelSelector"]["matchLabels"], labels));
}

/// What every build of the replicas on Redis must hold: the proxy, its Service, the security
/// contexts, no secret on a command line, the store's password from its Secret.
fn check_replicas(objects: &[Value]) -> Config {
    let deployment = named(objects, "Deployment", "mcp-proxy");
    let config = check_proxy(objects, deployment);
    check_service(objects, deployment);
    check_security(objects);
    check_no_secret_on_a_command_line(objects);
    check_store_password(objects, deployment, &config);
    config
}

#[test]
fn the_external_redis_overlay_runs_the_replicas_alone_on_another_redis() {
    let objects = build("overlays/external-redis");
    assert!(
        all(&objects, "StatefulSet").is_empty(),
        "no Redis of its own"
    );
    let config = check_replicas(&objects);
    let (host, _) = redis_address(&config.store);
    assert!(
        !all(&objects, "Service")
            .iter()
            .any(|s| s["metadata"]["name"] == host.as_str()),
        "{}: a Redis outside the build",
        config.store
    );
    let base = build("");
    let base = check_proxy(&base, named(&base, "Deployment", "mcp-proxy"));
    assert_ne!(config.store, base.store);
}

#[test]
fn the_managed_redis_overlay_speaks_tls_to_it_with_the_password_apart_from_the_url() {
    let objects = build("overlays/managed-redis");
    assert!(
        all(&objects, "StatefulSet").is_empty(),
        "no Redis of its own"
    );
    let config = check_replicas(&objects);
    assert!(config.store.starts_with("rediss://"), "{}", config.store);
    assert_eq!(
        mcp_session_proxy::telemetry::redact::url_password(&config.store),
        None,
        "{}",
        config.store
    );
    assert!(config.cluster.store_password.is_some());
    // The rest of the pod is the base's.
    let base = build("overlays/external-redis");
    let base = proxy_container(named(&base, "Deployment", "mcp-proxy"));
    let here = proxy_container(named(&objects, "Deployment", "mcp-proxy"));
    let args: Vec<&Value> = here["args"].as_array().unwrap().iter().collect();
    for arg in base["args"].as_array().unwrap() {
        assert!(
            args.contains(&arg),
            "{arg} is missing from the overlay's args"
        );
    }
}

#[test]
fn the_tls_overlay_serves_and_hops_over_tls_with_a_mounted_certificate() {
    let objects = build("overlays/tls");
    let config = check_replicas(&objects);
    let deployment = named(&objects, "Deployment", "mcp-proxy");

    // The listener and the hop use the certificate cert-manager writes into the Secret the pod
    // mounts: the listener shows it, and the hop trusts its CA alone.
    let certificate = named(&objects, "Certificate", "mcp-proxy-tls");
    assert_eq!(certificate["apiVersion"], "cert-manager.io/v1");
    let secret = text(&certificate["spec"]["secretName"]);
    let pod = &deployment["spec"]["template"]["spec"];
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["secret"]["secretName"] == secret)
        .expect("the certificate's Secret is mounted");
    let mount = proxy_container(deployment)["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume["name"])
        .expect("into the proxy's container");
    let args: Vec<&str> = proxy_container(deployment)["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(text)
        .collect();
    let given = |flag: &str| {
        let at = args
            .iter()
            .position(|a| *a == flag)
            .unwrap_or_else(|| panic!("{flag}"));
        args[at + 1]
    };
    let dir = text(&mount["mountPath"]);
    assert_eq!(given("--tls-cert"), format!("{dir}/tls.crt"));
    assert_eq!(given("--tls-key"), format!("{dir}/tls.key"));
    assert_eq!(given("--cluster-ca-file"), format!("{dir}/ca.crt"));
    // Readable by the proxy's user through the pod's group, by nobody else.
    assert_eq!(volume["secret"]["defaultMode"], 0o440);
    assert_eq!(pod["securityContext"]["fsGroup"], IMAGE_UID);

    // One certificate for every replica: clients verify it by the names they dial, the hop by
    // the Service's name (pods' addresses are in no certificate); a replica shows it to another.
    let names: Vec<&str> = certificate["spec"]["dnsNames"]
        .as_array()
        .unwrap()
        .iter()
        .map(text)
        .collect();
    let hop_name = config
        .cluster
        .server_name
        .as_deref()
        .expect("--cluster-server-name");
    assert!(names.contains(&hop_name), "{hop_name} in {names:?}");
    let service = all(&objects, "Service")
        .into_iter()
        .find(|s| s["metadata"]["name"] == hop_name)
        .expect("the name verified is the Service's");
    assert!(selects(
        &service["spec"]["selector"],
        &deployment["spec"]["template"]["metadata"]["labels"]
    ));
    let settings = config.http_settings().unwrap();
    for name in &names {
        assert!(
            host_allowed(&settings, name),
            "clients dial {name}: allowed_hosts"
        );
    }
    let usages = certificate["spec"]["usages"].as_array().unwrap();
    for usage in ["server auth", "client auth"] {
        assert!(usages.iter().any(|u| u == usage), "{usage}: {usages:?}");
    }
}

#[test]
fn the_sidecar_example_runs_one_proxy_in_front_of_the_server_beside_it() {
    let objects = build("sidecar");
    let deployment = named(&objects, "Deployment", "mcp-sidecar");
    assert_eq!(deployment["spec"]["replicas"], 1, "sessions in memory");
    let config = check_proxy(&objects, deployment);
    check_service(&objects, deployment);
    check_security(&objects);
    check_no_secret_on_a_command_line(&objects);
    assert_eq!(config.store, "memory");
    assert!(all(&objects, "StatefulSet").is_empty());

    // The server container listens on the pod's loopback, where the proxy's upstream is.
    let upstream: http::Uri = config
        .upstream
        .http
        .as_deref()
        .expect("an HTTP upstream")
        .parse()
        .unwrap();
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap();
    assert_eq!(containers.len(), 2);
    let server = containers
        .iter()
        .find(|c| c["name"] == "server")
        .expect("the server container");
    let server_args: Vec<&str> = server["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(text)
        .collect();
    let listen = server_args[server_args.iter().position(|a| *a == "--http").unwrap() + 1];
    assert_eq!(Some(listen), upstream.authority().map(|a| a.as_str()));
    assert_eq!(
        upstream.host(),
        Some("127.0.0.1"),
        "reached on the pod's loopback only"
    );
    // The server gets SIGTERM once the proxy has drained, so the proxy's last requests reach
    // it, and stops within the grace period too.
    let server_stops = pre_stop_sleep(server);
    assert!(server_stops >= config.drain_delay, "{server_stops:?}");
    let grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        .as_u64()
        .unwrap();
    assert!(Duration::from_secs(grace) > server_stops);
}

/// A `redis-server` started as the base's Redis container starts it, killed when dropped.
struct RedisContainer(std::process::Child);

impl Drop for RedisContainer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The first line of a Redis server's reply to each of `commands` (inline), in order.
fn redis_reply(port: u16, commands: &[&str]) -> Vec<String> {
    use std::io::{BufRead, Write};
    let stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    commands
        .iter()
        .map(|command| {
            writer
                .write_all(format!("{command}\r\n").as_bytes())
                .unwrap();
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            line.trim_end().to_owned()
        })
        .collect()
}

/// Polls `condition` until it holds, failing the test if it does not within 20 s (these tests
/// run child processes without a runtime).
fn within_real_time(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !condition() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The base's Redis container, run here as its pod runs it (its command and args, its
/// environment with the test's secret, a folder for its volume, a loopback port): it answers
/// only a client that gives the password, which is nowhere on its command line; with the
/// password the build ships (CHANGE-ME), it does not start.
#[test]
fn the_bases_redis_takes_only_clients_that_give_its_password() {
    let objects = build("");
    let redis = named(&objects, "StatefulSet", "mcp-proxy-redis");
    let container = &redis["spec"]["template"]["spec"]["containers"][0];
    let data = text(&container["volumeMounts"][0]["mountPath"]);
    let words: Vec<String> = [&container["command"], &container["args"]]
        .into_iter()
        .filter_map(Value::as_array)
        .flatten()
        .map(|word| text(word).to_owned())
        .collect();
    let dir = std::env::temp_dir().join(format!("mcp-kubernetes-redis-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let start = |password: &str| {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut command = Command::new(&words[0]);
        for word in &words[1..] {
            command.arg(match word.as_str() {
                path if path == data => dir.to_str().unwrap(),
                word => word,
            });
        }
        command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default());
        for variable in container["env"].as_array().unwrap() {
            let name = text(&variable["name"]);
            assert!(variable["valueFrom"]["secretKeyRef"].is_object(), "{name}");
            command.env(name, password);
        }
        let child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("redis-server runs (scripts/test installs it)");
        (RedisContainer(child), port)
    };

    let password = test_secret(&serde_json::json!({"name": "redis", "key": "password"}));
    let (mut server, port) = start(&password);
    within_real_time("Redis to listen", || {
        assert!(server.0.try_wait().unwrap().is_none(), "Redis exited");
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    let without = redis_reply(port, &["PING"]);
    assert!(without[0].starts_with("-NOAUTH"), "{without:?}");
    let with = redis_reply(port, &[&format!("AUTH {password}"), "PING"]);
    assert_eq!(with, ["+OK", "+PONG"]);
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", server.0.id())).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains(&password));
    drop(server);

    // The password the build ships: too short, so Redis does not start.
    let shipped = all(&objects, "Secret")
        .into_iter()
        .find(|s| s["metadata"]["name"] == container["env"][0]["valueFrom"]["secretKeyRef"]["name"])
        .unwrap();
    assert_eq!(shipped["data"]["password"], "Q0hBTkdFLU1F", "CHANGE-ME");
    let (mut server, _) = start("CHANGE-ME");
    let mut exited = None;
    within_real_time("Redis to refuse the shipped password", || {
        exited = server.0.try_wait().unwrap();
        exited.is_some()
    });
    let status = exited.unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(server.0.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(
        !status.success() && stderr.contains("at least 32"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

"""Reads docker/compose.yaml and docker/nginx.conf and prints what tests/it/cluster/compose.rs
checks: the services, each replica's command line and environment, each service's volumes, and
the balancer's configuration."""

import json
import sys
from pathlib import Path

import yaml

docker = Path(sys.argv[1])
compose = yaml.safe_load((docker / "compose.yaml").read_text())
services = compose["services"]
report = {
    "services": sorted(services),
    "commands": {name: services[name].get("command") for name in services},
    "builds": {name: services[name].get("build") for name in services},
    "environment": {name: services[name].get("environment") for name in services},
    "volumes": {name: services[name].get("volumes") for name in services},
    "balancer_volumes": services.get("balancer", {}).get("volumes"),
    "balancer_ports": services.get("balancer", {}).get("ports"),
    "nginx": (docker / "nginx.conf").read_text(),
}
print(json.dumps(report))

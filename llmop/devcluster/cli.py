"""A local Kubernetes control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok)
built from Go modules and run as processes on 127.0.0.1.

  build       build the pinned binaries into the cache (fast no-op when cached)
  up          start the plane with fake GPU nodes; prints the kubeconfig path
  down        stop it (all its processes) and drop its etcd data
  status      which processes run, and whether the API server is ready
  kubeconfig  print the admin kubeconfig's path (`--print` for its content)
"""

from __future__ import annotations

import argparse
import sys


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    sub.add_parser("build", help="build the binaries into the cache")
    sub.add_parser("up", help="start the plane (builds first if needed)")
    sub.add_parser("down", help="stop the plane")
    sub.add_parser("status", help="show the plane's processes and readiness")
    kc = sub.add_parser("kubeconfig", help="print the admin kubeconfig path")
    kc.add_argument("--print", dest="content", action="store_true", help="print the file's content instead")


def run(args: argparse.Namespace) -> int:
    from . import components, runner

    layout = runner.default_layout()
    if args.action == "build":
        spent = components.build(log=lambda m: print(m, file=sys.stderr))
        for c in components.COMPONENTS:
            print(f"{c.name} {c.version}: {components.bin_dir(c)}")
        if spent:
            print(f"built in {sum(spent.values()):.0f}s", file=sys.stderr)
        return 0
    if args.action == "up":
        components.build(log=lambda m: print(m, file=sys.stderr))
        with runner.locked(layout):
            if runner.healthy(layout):
                print(f"already running; kubeconfig {layout.kubeconfig}")
                return 0
            runner.up(layout)
        print(f"export KUBECONFIG={layout.kubeconfig}")
        return 0
    if args.action == "down":
        with runner.locked(layout):
            stopped = runner.down(layout)
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        return 0
    if args.action == "status":
        procs = runner.running(layout)
        for name, pid in procs.items():
            print(f"{name:26} {'pid ' + str(pid) if pid else 'not running'}")
        ready = all(procs.values()) and runner.healthy(layout)
        print(f"{'api server':26} {'ready' if ready else 'not ready'}")
        return 0 if ready else 1
    if args.action == "kubeconfig":
        if not layout.kubeconfig.exists():
            print(f"no kubeconfig at {layout.kubeconfig}: run `llmop dev-cluster up` first", file=sys.stderr)
            return 1
        if args.content:
            sys.stdout.write(layout.kubeconfig.read_text())
        else:
            print(layout.kubeconfig)
        return 0
    return 2

"""A local Kubernetes control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok)
built from Go modules and run as processes on 127.0.0.1.

  build       build the pinned binaries into the cache (fast no-op when cached)
  up          start the plane with fake GPU nodes and, where the machine allows, one real node
              (containerd + kubelet + kube-proxy) with the engine image loaded
  images      build the engine and operator images and load them into the real node
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
    up = sub.add_parser("up", help="start the plane (builds first if needed)")
    up.add_argument("--no-real-node", action="store_true", help="kwok nodes only (no containers run)")
    sub.add_parser("images", help="build the project's images and load them into the real node")
    sub.add_parser("down", help="stop the plane")
    sub.add_parser("status", help="show the plane's processes and readiness")
    kc = sub.add_parser("kubeconfig", help="print the admin kubeconfig path")
    kc.add_argument("--print", dest="content", action="store_true", help="print the file's content instead")


def _real_node(layout) -> bool:
    """Start the real node and load the images; say why not where the machine cannot."""
    from . import images, noderunner

    def log(m: str) -> None:
        print(m, file=sys.stderr)

    missing = noderunner.prerequisites()
    if missing:
        print("no real node (pods stay on kwok nodes): " + "; ".join(missing), file=sys.stderr)
        return False
    noderunner.start(layout, log=log)
    for spec in (images.ENGINE, images.OPERATOR):
        print(f"{spec.name} image: {noderunner.load_image(layout, spec, log)}")
    return True


def run(args: argparse.Namespace) -> int:
    from . import components, runner

    layout = runner.default_layout()
    if args.action == "build":
        spent = components.build(log=lambda m: print(m, file=sys.stderr), optional=True)
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
            else:
                runner.up(layout)
            if not args.no_real_node:
                _real_node(layout)
        print(f"export KUBECONFIG={layout.kubeconfig}")
        return 0
    if args.action == "images":
        with runner.locked(layout):
            if not runner.healthy(layout):
                print("the plane is not running: `llmop dev-cluster up` first", file=sys.stderr)
                return 1
            return 0 if _real_node(layout) else 1
    if args.action == "down":
        with runner.locked(layout):
            stopped = runner.down(layout)
        print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
        return 0
    if args.action == "status":
        from . import noderunner

        procs = runner.running(layout)
        procs |= {n: runner._alive(layout.pids / n) for n in noderunner.NODE_PROCESSES}
        for name, pid in procs.items():
            print(f"{name:26} {'pid ' + str(pid) if pid else 'not running'}")
        ready = runner.healthy(layout)
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

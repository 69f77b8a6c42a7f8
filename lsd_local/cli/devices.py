"""`lsd devices`: the backends and devices this llama.cpp build sees."""

from __future__ import annotations

import json

import click

MIB = 1 << 20


@click.command("devices")
@click.option("--rpc", default=None, metavar="HOST:PORT,...",
              help="Add these llama.cpp RPC servers first (each checked), as `lsd run --rpc`.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per device.")
@click.option("--no-repack", "-nr", is_flag=True,
              help="Show the devices as `lsd run --no-repack` would load models.")
def devices(rpc: str | None, as_json: bool, no_repack: bool) -> None:
    """List the devices llama.cpp can put layers on (and the CPU), with free and total
    memory, and whether llama.cpp's extra buffer types are used on the CPU (off where it
    traps AMX). Names are what --device and --draft-device take."""
    from ..backend import build_identity
    from ..backend.cpu_probe import repack_decision
    from ..backend.devices import add_rpc_servers, list_devices

    if rpc:
        add_rpc_servers([endpoint.strip() for endpoint in rpc.split(",") if endpoint.strip()])
    found = list_devices(memory=True)
    repack = repack_decision(True if no_repack else None, build_identity()).describe()
    if as_json:
        for device in found:
            extra = {"extra_buffer_types": repack} if device.kind == "CPU" else {}
            click.echo(json.dumps({"name": device.name, "description": device.description,
                                   "type": device.kind, "backend": device.backend,
                                   "free_bytes": device.free, "total_bytes": device.total,
                                   **extra}))
        return
    click.echo(f"{'NAME':24} {'TYPE':5} {'BACKEND':8} {'FREE MiB':>9} {'TOTAL MiB':>9}  "
               "DESCRIPTION")
    for device in found:
        click.echo(f"{device.name:24} {device.kind:5} {device.backend:8} "
                   f"{device.free // MIB:>9} {device.total // MIB:>9}  {device.description}")
    click.echo(f"extra buffer types (repacked weights, AMX) on the CPU: {repack}")
    if not any(device.takes_layers for device in found):
        click.echo("no GPU: models run on the CPU (a CUDA or Metal build of llama-cpp-python, "
                   "or --rpc, adds devices; see docs/devices.md)", err=True)

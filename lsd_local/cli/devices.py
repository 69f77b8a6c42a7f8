"""`lsd devices`: the backends and devices this llama.cpp build sees."""

from __future__ import annotations

import json

import click

MIB = 1 << 20


@click.command("devices")
@click.option("--rpc", default=None, metavar="HOST:PORT,...",
              help="Add these llama.cpp RPC servers first (each checked), as `lsd run --rpc`.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per device.")
def devices(rpc: str | None, as_json: bool) -> None:
    """List the devices llama.cpp can put layers on (and the CPU), with free and total
    memory. Names are what --device and --draft-device take."""
    from ..backend.devices import add_rpc_servers, list_devices

    if rpc:
        add_rpc_servers([endpoint.strip() for endpoint in rpc.split(",") if endpoint.strip()])
    found = list_devices(memory=True)
    if as_json:
        for device in found:
            click.echo(json.dumps({"name": device.name, "description": device.description,
                                   "type": device.kind, "backend": device.backend,
                                   "free_bytes": device.free, "total_bytes": device.total}))
        return
    click.echo(f"{'NAME':24} {'TYPE':5} {'BACKEND':8} {'FREE MiB':>9} {'TOTAL MiB':>9}  "
               "DESCRIPTION")
    for device in found:
        click.echo(f"{device.name:24} {device.kind:5} {device.backend:8} "
                   f"{device.free // MIB:>9} {device.total // MIB:>9}  {device.description}")
    if not any(device.takes_layers for device in found):
        click.echo("no GPU: models run on the CPU (a CUDA or Metal build of llama-cpp-python, "
                   "or --rpc, adds devices; see docs/devices.md)", err=True)

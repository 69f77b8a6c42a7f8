"""`lsd models` and `lsd pull`: the registry and the downloads."""

from __future__ import annotations

from dataclasses import replace

import click

from .options import complete_model, notify


@click.command()
@click.argument("name", shell_complete=complete_model)
def pull(name: str) -> None:
    """Download model NAME into the Hugging Face cache: a registry name (with its default
    draft) or any GGUF on the Hub as owner/repo[:QUANT] (hf.co/ optional; QUANT as in the
    file names, default Q4_K_M; a split model comes whole)."""
    from ..models.hub import download, snapshot_commit
    from ..models.hubnames import hub_specs
    from ..models.registry import find_spec, is_hub_name, load_registry

    registry = load_registry()
    if name not in registry and is_hub_name(name):
        specs = hub_specs(name)
    else:
        spec = find_spec(name, registry)
        specs = [spec] + ([find_spec(spec.draft, registry)] if spec.draft else [])
    commit = None  # the parts of a split model all come from the first one's commit
    for item in specs:
        click.echo(f"pulling {item.name}: {item.file} from {item.repo}", err=True)
        if commit is not None and item.repo == specs[0].repo and item.name == specs[0].name:
            item = replace(item, revision=commit)
        path = download(item, notify)
        commit = snapshot_commit(path, item.file) if commit is None else commit
        click.echo(path)


@click.command(name="models")
@click.option("--hub-sizes", is_flag=True,
              help="Ask the Hub for the size of entries the registry gives none (network).")
def list_models(hub_sizes: bool) -> None:
    """List the model registry: sizes, and what is downloaded."""
    from ..models.hub import cached_file, hub_size
    from ..models.registry import load_registry

    rows = [("NAME", "FILE", "QUANT", "DRAFT", "SIZE", "CACHED")]
    for spec in load_registry().values():
        path = cached_file(spec)
        size = path.stat().st_size if path else spec.size
        if size is None and hub_sizes:
            size = hub_size(spec)
        rows.append((spec.name, spec.file, spec.quant, spec.draft or "-",
                     "?" if size is None else f"{size / 1e9:.2f} GB", "yes" if path else "no"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


@click.command(name="rm")
@click.argument("name", shell_complete=complete_model)
def remove(name: str) -> None:
    """Delete downloaded model NAME (a registry name or owner/repo[:QUANT]) from the Hugging
    Face cache, all parts of a split model, through huggingface_hub's cache scan and deletion
    strategy. A registry model's draft stays."""
    from ..models.hub import remove_cached
    from ..models.hubnames import cached_hub_specs
    from ..models.registry import find_spec, is_hub_name, load_registry

    registry = load_registry()
    specs = (cached_hub_specs(name) if name not in registry and is_hub_name(name)
             else [find_spec(name, registry)])
    files = [spec.file for spec in specs]
    freed = remove_cached(specs[0].repo, files, name)
    click.echo(f"removed {name} ({', '.join(files)}, {freed})")

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
@click.argument("name", required=False, shell_complete=complete_model)
@click.option("--cache", "clear_cache", is_flag=True,
              help="Delete what lsd keeps between runs instead: the suffix indexes (past "
                   "prompts' ends and answers, as token ids) and what auto learned.")
def remove(name: str | None, clear_cache: bool) -> None:
    """Delete downloaded model NAME (a registry name or owner/repo[:QUANT]) from the Hugging
    Face cache, all parts of a split model, through huggingface_hub's cache scan and deletion
    strategy. A registry model's draft stays. With --cache: delete lsd's kept state."""
    if clear_cache or name is None:
        if name is not None or not clear_cache:
            raise click.UsageError("give a model NAME or --cache")
        click.echo(remove_kept_state())
        return
    from ..models.hub import remove_cached
    from ..models.hubnames import cached_hub_specs
    from ..models.registry import find_spec, is_hub_name, load_registry

    registry = load_registry()
    specs = (cached_hub_specs(name) if name not in registry and is_hub_name(name)
             else [find_spec(name, registry)])
    files = [spec.file for spec in specs]
    freed = remove_cached(specs[0].repo, files, name)
    click.echo(f"removed {name} ({', '.join(files)}, {freed})")


def remove_kept_state() -> str:
    """Delete the suffix indexes and learned.json; say what went."""
    from ..drafters.auto.learned import learned_path
    from ..drafters.suffixstore import suffix_dir

    files = [learned_path()]
    folder = suffix_dir()
    if folder.is_dir():
        files += sorted(p for p in folder.iterdir() if p.is_file())
    gone = []
    for path in files:
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise click.ClickException(f"cannot delete {path}: {exc.strerror}") from None
        gone.append((path, size))
    if not gone:
        return "nothing kept: no suffix index, nothing learned"
    total = sum(size for _, size in gone)
    return (f"removed {len(gone)} file(s), {total / 1e6:.1f} MB: "
            + ", ".join(str(path) for path, _ in gone)
            + "\n(an lsd process running now still holds what it saw and saves it again when "
            "it exits, lsd serve every minute: stop it first, or run it with --fresh)")

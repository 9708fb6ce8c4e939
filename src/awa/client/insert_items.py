"""``insert_many`` with options per job: :class:`InsertItem` among plain args.

A list of plain args shares one set of options, validated once (the fast path of
:func:`awa.client.insert.build_specs`, untouched). An :class:`InsertItem` in the list
carries its own ``queue``, ``priority``, ``run_at``, ``unique_opts``, ``ordering_key`` (and
the rest); what it leaves ``None`` comes from the call. Runs of plain args between items
still take the fast path, so a list without items costs one type check per element.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields
from typing import Any

from awa.client import insert as insert_path
from awa.client.insert import InsertItem, InsertSpec
from awa.errors import SerializationError, UniqueConflict, ValidationError

_OPTIONS = tuple(f.name for f in fields(InsertItem) if f.name != "args")


def _item_spec(
    index: int,
    item: InsertItem,
    shared: Mapping[str, Any],
    default_queue: Callable[[type[Any], str | None], str],
    default_kind: Callable[[type[Any]], str | None],
) -> InsertSpec:
    options = dict(shared)
    for name in _OPTIONS:
        value = getattr(item, name)
        if value is not None:
            options[name] = value
    if options.get("kind") is None and not isinstance(item.args, Mapping):
        options["kind"] = default_kind(type(item.args))
    if options.get("queue") is None:
        options["queue"] = default_queue(type(item.args), options.get("kind"))
    try:
        return insert_path.build_spec(item.args, **options)
    except ValidationError as exc:  # say which element of the list is wrong
        raise ValidationError(f"args_list[{index}].{exc.field}", exc.reason) from None
    except SerializationError as exc:
        raise SerializationError(f"args_list[{index}]: {exc}") from None


def build_specs(
    args_list: Iterable[Any],
    *,
    default_queue: Callable[[type[Any], str | None], str],
    default_kind: Callable[[type[Any]], str | None] = lambda _type: None,
    **shared: Any,
) -> list[InsertSpec]:
    """Specs for ``insert_many``: plain args share ``shared``; items override it."""
    if isinstance(args_list, str | bytes | Mapping) or not isinstance(args_list, Iterable):
        raise ValidationError(
            "args_list", f"must be a list of job args, got {type(args_list).__name__}"
        )
    items = list(args_list)
    if not any(isinstance(a, InsertItem) for a in items):
        specs = insert_path.build_specs(
            items, default_queue=default_queue, default_kind=default_kind, **shared
        )
        if shared.get("unique_opts") is not None:
            _refuse_repeated_keys(specs)
        return specs
    specs = []
    run: list[Any] = []
    for index, args in enumerate(items):
        if not isinstance(args, InsertItem):
            run.append(args)
            continue
        if run:
            specs += insert_path.build_specs(
                run, default_queue=default_queue, default_kind=default_kind,
                first_index=index - len(run), **shared,
            )  # fmt: skip
            run = []
        specs.append(_item_spec(index, args, shared, default_queue, default_kind))
    if run:
        specs += insert_path.build_specs(
            run, default_queue=default_queue, default_kind=default_kind,
            first_index=len(items) - len(run), **shared,
        )  # fmt: skip
    _refuse_repeated_keys(specs)
    return specs


def _refuse_repeated_keys(specs: list[InsertSpec]) -> None:
    """Two jobs of one batch with the same unique key: the COPY failed on the second
    with a conflict naming no job and no element of the list (a review)."""
    first_with: dict[bytes, int] = {}
    for index, spec in enumerate(specs):
        if spec.unique_key is None:
            continue
        first = first_with.setdefault(spec.unique_key, index)
        if first != index:
            raise UniqueConflict(
                f"args_list[{first}] and args_list[{index}] have the same unique key: one "
                "batch cannot insert both (nothing was inserted)",
                unique_key=spec.unique_key,
            )


__all__ = ["InsertItem", "build_specs"]

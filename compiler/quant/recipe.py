"""A quantization recipe: one value of each knob the recipe search may set (`options.RECIPE_KNOBS`),
the fallback recipe used where nothing is searched, and how the chosen recipe is shown.

The search itself is `recipe_search.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace


from vtakit.compiler.module.notes import QuantNotes
from vtakit.compiler.options import CHOICES, CalibrationMethod, QuantOptions, WeightRoundingMode, WideResidualMode
from vtakit.tables import TextTable

@dataclass(frozen=True)
class Recipe:
    """One value of each recipe knob (options.RECIPE_KNOBS), none "auto"."""
    calibration: CalibrationMethod = CalibrationMethod.MAX
    wide_residual: WideResidualMode = WideResidualMode.OFF
    weight_rounding: WeightRoundingMode = WeightRoundingMode.NEAREST

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, CHOICES[f.name].parse(getattr(self, f.name), concrete=True))

    def options(self) -> dict[str, str]:
        """compile_module's keywords that pin this recipe."""
        return {f.name: getattr(self, f.name).value for f in fields(self)}

    def label(self) -> str:
        return f"calibration {self.calibration}, wide residual {self.wide_residual}, " \
               f"weight rounding {self.weight_rounding}"


FALLBACK = Recipe()
"""The recipe where nothing is searched: each knob's value before the search existed."""


def fallback(options: QuantOptions) -> QuantOptions:
    """`options` with the knobs left "auto" at the fallback recipe's values (no search)."""
    return replace(options, **{k: getattr(FALLBACK, k) for k in options.auto_knobs()})


def recipe_lines(notes: QuantNotes) -> list[str]:
    """What the search chose, for the compile output and reports."""
    r = notes.recipe
    if r is None:
        return []
    chosen = Recipe(**r.chosen)
    moved = [k for k in r.searched if r.chosen[k] != getattr(FALLBACK, k)]
    what = ", ".join(f"{k.replace('_', ' ')} {r.chosen[k]}" for k in moved) or "the fallback recipe"
    lines = [f"quantization recipe (auto, {r.evaluated} tried in {r.seconds:.1f} s): {what}; "
             f"calibration-sample output cosine {r.cosine_before:.4f} -> {r.cosine_after:.4f} "
             f"({chosen.label()})"]
    if r.output_errors:
        shown = list(r.output_errors.items())[:OUTPUTS_SHOWN]
        lines.append("  output error (relative squared, per channel): " + ", ".join(f"{o} {e:.2e}" for o, e in shown)
                     + (f", ... {len(r.output_errors) - OUTPUTS_SHOWN} more" if len(r.output_errors) > OUTPUTS_SHOWN else ""))
    lines += [f"  not taken, it does not compile here: {label}: {why}" for label, why in r.failed.items()]
    return lines


OUTPUTS_SHOWN = 8
"""How many outputs' errors a compile prints (a detector has a few; a model may have hundreds)."""


def recipe_table(notes: QuantNotes | None) -> TextTable | None:
    """The recipes the search judged, in order, as a table (`vtakit report --accuracy`; `print` shows it as
    text); None without a search.  Each trial is judged against the recipe in the lead at that moment."""
    r = notes.recipe if notes is not None else None
    if r is None:
        return None
    table = TextTable(title="quantization recipes judged on the calibration samples (auto)")
    for column in ("recipe", "output error", "samples it lowered", "taken"):
        table.add_column(column, justify="left" if column == "recipe" else "right")
    chosen, start = Recipe(**r.chosen).label(), Recipe(**r.start).label()
    table.add_row(f"{start} (start)", f"{r.error_before:.5f}", "", "yes" if chosen == start else "")
    for label, error, lowered in r.trials:
        table.add_row(label, f"{error:.5f}", f"{lowered:.0%}", "yes" if label == chosen else "")
    for label, why in r.failed.items():
        table.add_row(label, "does not compile", "", why)
    return table

"""`infer.score.page`: cutting a page image into staff systems. Its own module, apart from the rest
of `infer`, because the score data stage cuts its engraved pages with it: a stage's code deps
are its import closure (dvc.yaml), so a change to the inference settings' schema (audio chunks,
limits) no longer reruns the data stage and everything after it."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from sonfolio.config.base import Strict


class PageSplit(Strict):
    """Cutting a page image into staff systems (sonfolio/score/common/page.py)."""

    staff_line_fraction: Annotated[float, Field(gt=0.0, le=1.0)]  # of the ink's width
    min_staff_lines: Annotated[int, Field(ge=1, le=16)]  # lines in a group to count as a staff
    # a staff shorter than the page's long ones (a last system left at its natural width)
    # counts when its lines are this many staff spaces long
    short_staff_spaces: Annotated[float, Field(gt=0.0, le=1000.0)]
    # the page is also searched in this many vertical strips, for staff lines a photo or a
    # page curl has bent (each strip holds a nearly straight piece); 1: the whole width only
    strips: Annotated[int, Field(ge=1, le=64)]
    # gaps in a staff line up to this many staff spaces wide are bridged when the lines are
    # looked for again (a worn, thresholded or low-dpi print breaks them into dashes); 0: off
    line_gap_spaces: Annotated[float, Field(ge=0.0, le=2.0)]
    max_skew_deg: Annotated[float, Field(ge=0.0, le=10.0)]  # tilt straightened before cutting
    # how far (staff spaces) above and below its lines a staff keeps ink that does not cross
    # them (taken link by link: a whole note's ledger lines, a scan's bleed-through), cut there
    # so ghost print under a line does not stretch its box (the reading then shrinks it); ink
    # crossing the lines is kept within 10 (ink.CROSSING_REACH)
    reach_spaces: Annotated[float, Field(gt=0.0, le=100.0)]
    # each system's image keeps only its own staff's ink: ink another staff owns or none does
    # (a title, a neighbour's low notes, a scan's bleed-through between the staves) is painted
    # over in the paper's grey; and ownership is strict (ink.owners' `strict`): what lies far
    # from both staves between them, and the title words over the first staff's notes, go with
    # none
    own_ink_only: bool

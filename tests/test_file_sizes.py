"""No product module over :data:`MAX_LINES` lines: a longer one holds more than one concept; split it by concept."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("app", "spouts", "states")
MAX_LINES = 500


def oversized(root: Path = ROOT, limit: int = MAX_LINES) -> dict[str, int]:
    """Every Python file of the product with more than ``limit`` lines, by path, with its line count."""
    sizes = {str(p.relative_to(root)): len(p.read_text(encoding="utf-8").splitlines())
             for package in PRODUCT for p in sorted((root / package).rglob("*.py"))}
    return {p: n for p, n in sizes.items() if n > limit}


def test_no_product_file_is_over_the_limit() -> None:
    assert len(list((ROOT / "app").rglob("*.py"))) > 50, "the walk found too few modules"
    too_long = oversized()
    assert not too_long, f"product files over {MAX_LINES} lines (split them by concept): {too_long}"


def test_the_count_sees_a_long_file(tmp_path: Path) -> None:
    (tmp_path / "app" / "pkg").mkdir(parents=True)
    (tmp_path / "app" / "pkg" / "long.py").write_text("x = 1\n" * 501)
    (tmp_path / "spouts").mkdir()
    (tmp_path / "spouts" / "short.py").write_text("x = 1\n" * 500)
    (tmp_path / "states").mkdir()
    assert oversized(tmp_path) == {"app/pkg/long.py": 501}

"""The papers' machinery: each paper table as a suite (one TOML file in `tables/`, read by `suites.py`), the paper's
claims and the rules that judge them on the runs (`claims.py`), `pfedkit reproduce` with the claims table
(`reproduce.py`) and the per-paper pages (`paper_pages.py`). The general tools it runs on (a grid of runs, compare,
the pipeline) are in `pfedkit/experiments/`.
"""

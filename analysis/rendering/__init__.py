"""The rendering: what the statistics' results look like to a reader. words.py (the terminal
summary, sentences, notes, the next step), answer_grid.py (the verdict grid, as text and as a
table), tables.py (a response's tables), files.py (the HTML and Markdown reports), plots.py,
notebook.py (a notebook executed: the engine's, or one the swept workload ships). Nothing
under `analysis` outside it imports it but the report's builder and the CLI
(`tests/test_layout.py`)."""

"""Reproductions of the source papers' printed tables and figures, next to the library rather than inside it.

:mod:`bloomwise.reproduce.summary_cache`: Tables 3-5 and Figure 4 of *Summary Cache* (Fan, Cao, Almeida, Broder).
"""

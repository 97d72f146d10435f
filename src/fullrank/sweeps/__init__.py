"""Sweeps: many runs of the recipes, from one sweep file (:mod:`fullrank.sweeps.plan`), trained
side by side or on a cluster (:mod:`fullrank.sweeps.run`) and tabulated and plotted in each
task's own figures (:mod:`fullrank.sweeps.report`)."""

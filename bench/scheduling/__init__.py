"""The reactive-scheduling study (thesis ch. 4-5): runs, workers, plots, refits."""

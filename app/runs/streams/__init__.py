"""The live event streams of the run, experiment, sweep and GPU pages, and the shared poll pool
behind them."""

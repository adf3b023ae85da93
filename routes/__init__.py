"""Route presets shipped with the suite: `--routes NAME` with no such file where the suite runs is routes/NAME.toml."""

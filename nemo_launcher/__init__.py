"""NeMo-style launcher: `launch/` turns configs into cluster jobs, `jobs/` holds the programs those jobs run."""

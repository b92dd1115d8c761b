"""The AutoConfigurator's job programs: `candidate` runs one searched layout through its family's training
program, `analysis` ranks the finished candidates by their measured step time (final_result/)."""

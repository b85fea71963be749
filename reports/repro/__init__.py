"""A minimal reproducer of one canary record (``loadgen repro``): the folder (``folder``), assembled from the
record chosen (``choice``), the load in flight (``in_flight``), the side by side (``side_by_side``), the replay
(``replay`` with ``toml_writer``) and its README (``readme``)."""

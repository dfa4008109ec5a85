"""The compatibility properties against the implementations people use (forward, backward, single cells),
and the peers' plugin API and optional packages."""

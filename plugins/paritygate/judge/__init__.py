"""The parity judgement: matches_reference, the properties, the reference's noise floor, vacuity, divergence."""

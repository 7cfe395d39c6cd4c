"""Units of work: authentication, one transaction per verb, database faults mapped to errors."""

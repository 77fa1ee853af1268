"""Schedule semantics: cron in IANA zones, DST policies, misfire and overlap (issue 4)."""

-- What could not be ingested, and why? Grouped by file and reason, with the first line to look at.
SELECT source_path, error, count(*) AS records, min(line) AS first_line
FROM rejects
GROUP BY ALL
ORDER BY records DESC, source_path;

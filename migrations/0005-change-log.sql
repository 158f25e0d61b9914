
-- Every statement that writes a table appends, in its own transaction, what it changed: the table,
-- the records named (key names, organization ids; none for a list, or for more than
-- 10000 at once), and the writing transaction's id. A replica lists every table at one
-- transaction snapshot, then reads the entries of the transactions that snapshot did not see: an
-- entry of a transaction that commits late is never skipped (PgQ cuts its batches the same way).
CREATE TABLE directory_changes (
  txid xid8 NOT NULL DEFAULT pg_current_xact_id(),
  table_name text NOT NULL,
  names text[],
  written_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX directory_changes_txid ON directory_changes (txid);
-- The newest transaction whose entries trim removed, and the last trim that removed any: a replica
-- whose position is older than that trim, and not older than what it removed, cannot tell what
-- changed since, and reads every table again, as a Kubernetes watch answered 410 Gone lists again.
CREATE TABLE directory_changes_trimmed (
  only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
  through xid8 NOT NULL,
  trimmed_by xid8 NOT NULL
);
INSERT INTO directory_changes_trimmed (through, trimmed_by) VALUES ('0', '0');

-- The notifications stay as they were: a replica of this build reads the log when woken, whatever
-- the payload says, and a replica of the previous build still follows its notices during a rolling upgrade.
CREATE OR REPLACE FUNCTION directory_notify_table() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO directory_changes (table_name) VALUES (TG_TABLE_NAME);
  PERFORM pg_notify('model_gateway_directory', json_build_object('table', TG_TABLE_NAME)::text);
  RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION directory_notify_rows() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  column_name text := TG_ARGV[0];
  field text := TG_ARGV[1];
  changed text[];
  payload text;
BEGIN
  IF TG_OP = 'INSERT' THEN
    EXECUTE format('SELECT array_agg(DISTINCT %I) FROM new_rows', column_name) INTO changed;
  ELSIF TG_OP = 'DELETE' THEN
    EXECUTE format('SELECT array_agg(DISTINCT %I) FROM old_rows', column_name) INTO changed;
  ELSIF TG_OP = 'UPDATE' THEN
    EXECUTE format('SELECT array_agg(DISTINCT %1$I) FROM (SELECT %1$I FROM old_rows UNION SELECT %1$I FROM new_rows) AS touched', column_name) INTO changed;
  END IF;
  IF TG_OP <> 'TRUNCATE' AND changed IS NULL THEN
    RETURN NULL;
  END IF;
  INSERT INTO directory_changes (table_name, names)
    VALUES (TG_TABLE_NAME, CASE WHEN cardinality(changed) <= 10000 THEN changed END);
  payload := json_build_object('table', TG_TABLE_NAME, field, changed)::text;
  IF TG_OP = 'TRUNCATE' OR octet_length(payload) > 7900 THEN
    payload := json_build_object('table', TG_TABLE_NAME)::text;
  END IF;
  PERFORM pg_notify('model_gateway_directory', payload);
  RETURN NULL;
END
$$;


-- Expand only: columns the replicas of the release before do not read (they go on serving every key
-- as before), and a table of their own. A rotation keeps the key's name and row: the secret it had
-- goes to previous_sha256 until previous_expires_at (the end of the grace). The checks scan the table
-- once (all null, some 0.1 s at a million keys) and refuse a bad value at write time from then on.
ALTER TABLE keys
  ADD COLUMN disabled boolean NOT NULL DEFAULT false,
  ADD COLUMN rate_limit_per_minute integer CONSTRAINT keys_rate_limit_check CHECK (rate_limit_per_minute BETWEEN 1 AND 1000000000),
  ADD COLUMN previous_sha256 text CONSTRAINT keys_previous_sha256_check CHECK (char_length(previous_sha256) = 64 AND previous_sha256 !~ '[^0-9a-f]'),
  ADD COLUMN previous_expires_at timestamptz,
  ADD CONSTRAINT keys_previous_check CHECK ((previous_sha256 IS NULL) = (previous_expires_at IS NULL));

-- Every change of a key, written by the database itself (the trigger below), whatever wrote the key:
-- npm run key, an import, psql. Never a secret nor its hash. Only that trigger writes it (as the schema's
-- owner: writers have no grant on it), with its transaction's time and id, the role that logged in and
-- its client's application_name; an entry is never changed, and only a trim removes entries (npm run db
-- -- trim, past KEY_HISTORY_RETENTION_DAYS). Without a row trigger of its own: an import of a million
-- keys writes a million entries, and a trigger per entry doubled its time.
CREATE TABLE key_history (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at timestamptz NOT NULL DEFAULT now(),
  -- Null for a TRUNCATE, which names no key.
  name text,
  action text NOT NULL,
  -- The fields changed, each [before, after]; the fields minted with; a replaced secret as "replaced".
  changes jsonb,
  -- The role that logged in: a SECURITY DEFINER function, as the trigger below is, changes current_user, not session_user.
  role text NOT NULL DEFAULT session_user,
  client text DEFAULT nullif(current_setting('application_name'), ''),
  txid xid8 NOT NULL DEFAULT pg_current_xact_id()
);
CREATE INDEX key_history_name ON key_history (name, id);
-- Entries come in the order of time: a BRIN index is enough for a trim, and costs an import almost nothing.
CREATE INDEX key_history_at ON key_history USING brin (at);

CREATE FUNCTION key_history_unchanged() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'the entries of key_history are never changed' USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER key_history_unchanged BEFORE UPDATE ON key_history FOR EACH ROW EXECUTE FUNCTION key_history_unchanged();

-- Only the schema's owner writes or removes entries: the trigger on keys and key_history_trim run as it
-- (SECURITY DEFINER). A role granted every right on the tables, as a writer of keys may be, can neither
-- forge an entry nor remove one. Once per statement: an import's million entries pay it once.
CREATE FUNCTION key_history_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_user::regrole <> (SELECT relowner FROM pg_class WHERE oid = TG_RELID)::regrole THEN
    RAISE EXCEPTION 'the entries of key_history are written by the database alone (the trigger on keys), and removed by npm run db -- trim'
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER key_history_guard BEFORE INSERT OR DELETE OR TRUNCATE ON key_history FOR EACH STATEMENT EXECUTE FUNCTION key_history_guard();

-- The trim of npm run db -- trim: the entries written before now minus `older_than`, as the owner; answers how many.
CREATE FUNCTION key_history_trim(older_than interval) RETURNS bigint LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT AS $$
  WITH gone AS (DELETE FROM key_history WHERE at < now() - older_than RETURNING 1) SELECT count(*) FROM gone
$$;

-- A key keeps its name for life: the commands, the rate limit and the history go by it. A rename is
-- refused (mint a key of the new name, revoke the old one), where the history could only have shown
-- it as two names and lost what else the statement changed.
CREATE FUNCTION keys_name_fixed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'key % cannot be renamed to %: a key keeps its name; mint a key of the new name and revoke this one', quote_literal(OLD.name), quote_literal(NEW.name)
    USING ERRCODE = 'check_violation', TABLE = 'keys';
END
$$;
CREATE TRIGGER keys_name_fixed BEFORE UPDATE OF name ON keys FOR EACH ROW WHEN (OLD.name IS DISTINCT FROM NEW.name) EXECUTE FUNCTION keys_name_fixed();

-- A key's fields as history shows them: never a hash.
CREATE FUNCTION key_history_fields(key jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
  SELECT key - 'name' - 'sha256' - 'previous_sha256'
$$;

-- The fields that differ, each [before, after]; a hash that changed as "replaced".
CREATE FUNCTION key_history_changes(before jsonb, after jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(jsonb_object_agg(field, jsonb_build_array(old_value, new_value)), '{}'::jsonb)
      || CASE WHEN before->'sha256' IS DISTINCT FROM after->'sha256' THEN '{"sha256": "replaced"}'::jsonb ELSE '{}'::jsonb END
    FROM jsonb_each(key_history_fields(before)) AS old_fields (field, old_value)
    JOIN jsonb_each(key_history_fields(after)) AS new_fields (field, new_value) USING (field)
    WHERE old_value IS DISTINCT FROM new_value
$$;

-- Once per statement, from its transition tables: an import of a million keys writes its entries in
-- one INSERT, where a row trigger ran a statement per key. directory.key_reason, set by the commands
-- (SET LOCAL), names why: 'prune' or 'import'; the word a writer declares, where the role, client, time
-- and fields are the database's.
CREATE FUNCTION key_history_record() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  reason text := coalesce(current_setting('directory.key_reason', true), '');
BEGIN
  IF TG_OP = 'INSERT' THEN
    -- The fields a key is minted with, those it has: built, not converted from the row (to_jsonb took a third longer at a million keys).
    INSERT INTO key_history (name, action, changes)
      SELECT name, CASE reason WHEN 'import' THEN 'imported' ELSE 'minted' END,
        jsonb_strip_nulls(jsonb_build_object('kind', kind, 'organization_id', organization_id, 'expires_at', expires_at,
          'disabled', CASE WHEN disabled THEN true END, 'rate_limit_per_minute', rate_limit_per_minute))
      FROM new_rows;
  ELSIF TG_OP = 'DELETE' THEN
    INSERT INTO key_history (name, action)
      SELECT name, CASE reason WHEN 'prune' THEN 'pruned' WHEN 'import' THEN 'removed by import' ELSE 'revoked' END FROM old_rows;
  ELSIF TG_OP = 'UPDATE' THEN
    -- Paired by name, which an UPDATE cannot change (keys_name_fixed).
    INSERT INTO key_history (name, action, changes)
      SELECT after.name,
        CASE
          WHEN reason = 'prune' THEN 'pruned'
          WHEN before.sha256 IS DISTINCT FROM after.sha256 THEN 'rotated'
          WHEN before.disabled IS DISTINCT FROM after.disabled THEN CASE WHEN after.disabled THEN 'disabled' ELSE 'enabled' END
          WHEN before.expires_at IS DISTINCT FROM after.expires_at THEN 'expiry set'
          WHEN before.rate_limit_per_minute IS DISTINCT FROM after.rate_limit_per_minute THEN 'limit set'
          ELSE 'changed'
        END,
        key_history_changes(to_jsonb(before), to_jsonb(after))
      FROM old_rows AS before JOIN new_rows AS after ON before.name = after.name
      -- An UPDATE that sets what was there changes nothing.
      WHERE before IS DISTINCT FROM after;
  ELSE
    INSERT INTO key_history (name, action) VALUES (NULL, 'truncated: every key removed');
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER keys_history_insert AFTER INSERT ON keys
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION key_history_record();
CREATE TRIGGER keys_history_update AFTER UPDATE ON keys
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION key_history_record();
CREATE TRIGGER keys_history_delete AFTER DELETE ON keys
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION key_history_record();
CREATE TRIGGER keys_history_truncate AFTER TRUNCATE ON keys
  FOR EACH STATEMENT EXECUTE FUNCTION key_history_record();
REVOKE ALL ON key_history FROM PUBLIC;

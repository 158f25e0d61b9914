import type pg from 'pg'
import { KINDS, RECORD_KINDS, type RecordKind } from '../../registry.js'

/** The channel the triggers notify on; every replica listens to it. */
export const CHANNEL = 'model_gateway_directory'

/** The most member rows a notification names (a row updated counts twice: before and after). */
const MEMBERS_NAMED = 100

/**
 * The most records one entry of the change log names; a statement that writes more logs its table
 * alone, and the replicas read the table whole.
 */
export const NAMES_LOGGED = 10_000

/**
 * The checks migration 7 added, as it wrote them: a key's kind, and the shape and case of its hash. They
 * were made from the key's schema where the database checks it cheaply and as the schema does (checkOf in
 * test/postgres.ts, which explains their form); test/repositories/sources/postgres-edges.test.ts holds
 * them equal to what the schema makes today, so that a change of its literals or pattern fails until a
 * migration of its own replaces the check. validateChecks names and counts with them.
 */
export const KEY_CHECKS = [
  { table: 'keys', name: 'keys_kind_check', check: "kind IN ('standard', 'management')" },
  { table: 'keys', name: 'keys_sha256_check', check: "char_length(sha256) = 64 AND sha256 !~ '[^0-9a-f]'" }
] as const

const sqlString = (value: string) => `'${value.replaceAll("'", "''")}'`

/**
 * The migrations, in order; never edit one that has shipped, add the next. Each runs in the
 * transaction of `migrate`, so a failure leaves the schema as it was. Each is the SQL text that
 * shipped, and nothing else: no registry entry or schema goes in, since editing one would rewrite a
 * migration databases have already run. (Migrations 4 and 7 were made from the registry and the key's
 * schema when they shipped, and hold the text made then, comments included. A new list kind's
 * migration holds what listTableSql in test/postgres.ts makes of its entry: see LIST_COLUMNS.)
 *
 * One table per kind of record, one row per record, one column per field, named like the JSON
 * field. The constraints say in SQL what the schemas say, where SQL can: what they cannot (an ISO
 * country code that does not exist, a URL that does not parse) is checked by the replicas, which
 * do not serve a row they refuse.
 */
const MIGRATIONS: Array<{ version: number, name: string, sql: string }> = [{
  version: 1,
  name: 'directory tables and change notifications',
  sql: String.raw`
-- Checks shared by several tables. Each answers null for a null value, which a CHECK lets pass: a
-- column that must hold a value says NOT NULL.
CREATE FUNCTION directory_is_url(value text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT value ~ '^https?://[^\s/?#]+[^\s]*$'
$$;

CREATE FUNCTION directory_is_country_code(value text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT value ~ '^[A-Z]{2}$'
$$;

-- A one-dimensional array (or an empty one) without nulls, every item satisfying the pattern.
CREATE FUNCTION directory_all_match(items text[], pattern text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(array_ndims(items), 1) = 1
     AND NOT EXISTS (SELECT 1 FROM unnest(items) AS item WHERE item IS NULL OR item !~ pattern)
$$;

-- A JSON object with exactly these keys, each holding a value of this JSON type (a JSON null is
-- not one: a field that may be null is an SQL NULL).
CREATE FUNCTION directory_is_object_of(value jsonb, keys text[], value_type text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN value IS NULL THEN NULL WHEN jsonb_typeof(value) = 'object' THEN
    value ?& keys AND value - keys = '{}'::jsonb
      AND NOT EXISTS (SELECT 1 FROM jsonb_each(value) AS field WHERE jsonb_typeof(field.value) <> value_type)
  ELSE false END
$$;

CREATE FUNCTION directory_is_pricing(value jsonb) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
  SELECT directory_is_object_of(value, '{prompt,completion,image,request}', 'string')
     AND NOT EXISTS (SELECT 1 FROM jsonb_each_text(value) AS price WHERE price.value !~ '^-?(0|[1-9][0-9]*)(\.[0-9]+)?$')
$$;

CREATE TABLE providers (
  slug text PRIMARY KEY CHECK (slug ~ '^[a-z0-9][a-z0-9._-]*$'),
  position bigint,
  name text NOT NULL CHECK (name <> ''),
  privacy_policy_url text CHECK (directory_is_url(privacy_policy_url)),
  terms_of_service_url text CHECK (directory_is_url(terms_of_service_url)),
  status_page_url text CHECK (directory_is_url(status_page_url)),
  headquarters text CHECK (directory_is_country_code(headquarters)),
  datacenters text[] CHECK (directory_all_match(datacenters, '^[A-Z]{2}$')),
  -- The optional keys this provider's JSON leaves out (null columns are served as null): the files
  -- tell "absent" from "null", and the same data must give the same bytes from either source.
  omitted_fields text[] NOT NULL DEFAULT '{}'
    CHECK (omitted_fields <@ '{terms_of_service_url,status_page_url,headquarters,datacenters}'),
  CONSTRAINT providers_omitted_fields_are_null CHECK (
    NOT ('terms_of_service_url' = ANY (omitted_fields) AND terms_of_service_url IS NOT NULL)
    AND NOT ('status_page_url' = ANY (omitted_fields) AND status_page_url IS NOT NULL)
    AND NOT ('headquarters' = ANY (omitted_fields) AND headquarters IS NOT NULL)
    AND NOT ('datacenters' = ANY (omitted_fields) AND datacenters IS NOT NULL))
);

CREATE TABLE endpoints (
  -- Nothing in an endpoint is unique (several tags of one model, one tag for several models).
  id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  position bigint,
  model_id text NOT NULL CHECK (model_id ~ '^[^/\s]+/[^\s]+$'),
  model_name text NOT NULL CHECK (model_name <> ''),
  name text NOT NULL CHECK (name <> ''),
  provider_name text NOT NULL CHECK (provider_name <> ''),
  tag text NOT NULL CHECK (tag <> ''),
  context_length bigint NOT NULL CHECK (context_length >= 0),
  max_prompt_tokens bigint CHECK (max_prompt_tokens >= 0),
  max_completion_tokens bigint CHECK (max_completion_tokens >= 0),
  pricing jsonb NOT NULL CHECK (directory_is_pricing(pricing)),
  quantization text CHECK (quantization <> ''),
  status bigint NOT NULL,
  supported_parameters text[] NOT NULL CHECK (directory_all_match(supported_parameters, '.')),
  supports_implicit_caching boolean NOT NULL,
  supports_tool_choice jsonb NOT NULL CHECK (directory_is_object_of(supports_tool_choice, '{auto,function,none,required}', 'boolean')),
  latency_last_30m jsonb CHECK (directory_is_object_of(latency_last_30m, '{p50,p75,p90,p99}', 'number')),
  throughput_last_30m jsonb CHECK (directory_is_object_of(throughput_last_30m, '{p50,p75,p90,p99}', 'number')),
  uptime_last_5m double precision CHECK (uptime_last_5m BETWEEN 0 AND 100),
  uptime_last_30m double precision CHECK (uptime_last_30m BETWEEN 0 AND 100),
  uptime_last_1d double precision CHECK (uptime_last_1d BETWEEN 0 AND 100)
);

CREATE TABLE organizations (
  id text PRIMARY KEY CHECK (id <> ''),
  position bigint,
  name text NOT NULL CHECK (name <> '')
);

CREATE TABLE members (
  organization_id text NOT NULL REFERENCES organizations (id) ON DELETE CASCADE ON UPDATE CASCADE,
  id text NOT NULL CHECK (id <> ''),
  position bigint,
  email text NOT NULL CHECK (email ~ '^[^\s@]+@[^\s@]+\.[^\s@]+$'),
  first_name text,
  last_name text,
  role text NOT NULL CHECK (role IN ('org:admin', 'org:member')),
  PRIMARY KEY (organization_id, id)
);
-- One organization's members in page order, read by an index scan.
CREATE INDEX members_order ON members (organization_id, position, id);

-- No foreign key to organizations: a management key of an organization that does not exist is
-- valid data (it answers 404 on the member listing), as it is in keys.json.
CREATE TABLE keys (
  name text PRIMARY KEY CHECK (name <> ''),
  sha256 text NOT NULL UNIQUE CHECK (sha256 ~ '^[0-9a-f]{64}$'),
  kind text NOT NULL CHECK (kind IN ('standard', 'management')),
  organization_id text NOT NULL CHECK (organization_id <> '')
);

-- Change notifications: after every statement that writes a table (whatever tool runs it), one
-- NOTIFY saying which part changed, delivered to every listening replica when the transaction
-- commits. A JSON payload: {"table": "keys"}; for members, the organizations whose members changed,
-- or none listed (all of them) when the list would not fit the 8000-byte payload.
CREATE FUNCTION directory_notify_table() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('${CHANNEL}', json_build_object('table', TG_TABLE_NAME)::text);
  RETURN NULL;
END
$$;

CREATE FUNCTION directory_notify_members() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  changed text[];
  payload text;
BEGIN
  IF TG_OP = 'INSERT' THEN
    SELECT array_agg(DISTINCT organization_id) INTO changed FROM new_rows;
  ELSIF TG_OP = 'DELETE' THEN
    SELECT array_agg(DISTINCT organization_id) INTO changed FROM old_rows;
  ELSIF TG_OP = 'UPDATE' THEN
    SELECT array_agg(DISTINCT organization_id) INTO changed
      FROM (SELECT organization_id FROM old_rows UNION SELECT organization_id FROM new_rows) AS touched;
  END IF;
  IF TG_OP <> 'TRUNCATE' AND changed IS NULL THEN
    RETURN NULL;
  END IF;
  payload := json_build_object('table', 'members', 'organization_ids', changed)::text;
  IF TG_OP = 'TRUNCATE' OR octet_length(payload) > 7900 THEN
    payload := json_build_object('table', 'members')::text;
  END IF;
  PERFORM pg_notify('${CHANNEL}', payload);
  RETURN NULL;
END
$$;

CREATE TRIGGER providers_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON providers
  FOR EACH STATEMENT EXECUTE FUNCTION directory_notify_table();
CREATE TRIGGER endpoints_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON endpoints
  FOR EACH STATEMENT EXECUTE FUNCTION directory_notify_table();
CREATE TRIGGER organizations_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON organizations
  FOR EACH STATEMENT EXECUTE FUNCTION directory_notify_table();
CREATE TRIGGER keys_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON keys
  FOR EACH STATEMENT EXECUTE FUNCTION directory_notify_table();
-- Transition tables need one trigger per event.
CREATE TRIGGER members_notify_insert AFTER INSERT ON members
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION directory_notify_members();
CREATE TRIGGER members_notify_update AFTER UPDATE ON members
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION directory_notify_members();
CREATE TRIGGER members_notify_delete AFTER DELETE ON members
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION directory_notify_members();
CREATE TRIGGER members_notify_truncate AFTER TRUNCATE ON members
  FOR EACH STATEMENT EXECUTE FUNCTION directory_notify_members();
`
}, {
  version: 2,
  name: 'notifications that name the keys and organizations changed',
  sql: String.raw`
-- A change of keys names the keys, and a change of organizations their ids: a replica reads those
-- rows alone, whatever the size of the table. When the names would not fit the 8000-byte payload
-- (a bulk change), none are listed, and the replicas read the whole table.
CREATE FUNCTION directory_notify_rows() RETURNS trigger LANGUAGE plpgsql AS $$
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
  payload := json_build_object('table', TG_TABLE_NAME, field, changed)::text;
  IF TG_OP = 'TRUNCATE' OR octet_length(payload) > 7900 THEN
    payload := json_build_object('table', TG_TABLE_NAME)::text;
  END IF;
  PERFORM pg_notify('${CHANNEL}', payload);
  RETURN NULL;
END
$$;

DROP TRIGGER keys_notify ON keys;
DROP TRIGGER organizations_notify ON organizations;
CREATE TRIGGER keys_notify_insert AFTER INSERT ON keys
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION directory_notify_rows('name', 'names');
CREATE TRIGGER keys_notify_update AFTER UPDATE ON keys
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION directory_notify_rows('name', 'names');
CREATE TRIGGER keys_notify_delete AFTER DELETE ON keys
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION directory_notify_rows('name', 'names');
CREATE TRIGGER keys_notify_truncate AFTER TRUNCATE ON keys
  FOR EACH STATEMENT EXECUTE FUNCTION directory_notify_rows('name', 'names');
CREATE TRIGGER organizations_notify_insert AFTER INSERT ON organizations
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION directory_notify_rows('id', 'ids');
CREATE TRIGGER organizations_notify_update AFTER UPDATE ON organizations
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION directory_notify_rows('id', 'ids');
CREATE TRIGGER organizations_notify_delete AFTER DELETE ON organizations
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION directory_notify_rows('id', 'ids');
CREATE TRIGGER organizations_notify_truncate AFTER TRUNCATE ON organizations
  FOR EACH STATEMENT EXECUTE FUNCTION directory_notify_rows('id', 'ids');
`
}, {
  version: 3,
  name: 'member notifications that name the members changed',
  sql: String.raw`
-- A change of a few members names them too, by organization, position (as text: a bigint) and id,
-- before and after: a replica reads again the part of the organization's page order around them,
-- not a million members. More than ${MEMBERS_NAMED} rows, or a payload past 7900 bytes, names the
-- organizations alone, as before.
CREATE OR REPLACE FUNCTION directory_notify_members() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  -- The rows the statement wrote: before, after, or both.
  touched text := CASE TG_OP WHEN 'INSERT' THEN 'new_rows' WHEN 'DELETE' THEN 'old_rows'
    ELSE '(SELECT organization_id, position, id FROM old_rows UNION ALL SELECT organization_id, position, id FROM new_rows)' END;
  changed text[];
  named json;
  named_count integer;
  payload text;
BEGIN
  IF TG_OP <> 'TRUNCATE' THEN
    EXECUTE format('SELECT array_agg(DISTINCT organization_id) FROM %s AS touched', touched) INTO changed;
    EXECUTE format('SELECT json_agg(json_build_array(organization_id, position::text, id)), count(*)
      FROM (SELECT organization_id, position, id FROM %s AS touched LIMIT ${MEMBERS_NAMED + 1}) AS named_rows', touched) INTO named, named_count;
  END IF;
  IF TG_OP <> 'TRUNCATE' AND changed IS NULL THEN
    RETURN NULL;
  END IF;
  payload := json_build_object('table', 'members', 'organization_ids', changed,
    'members', CASE WHEN named_count <= ${MEMBERS_NAMED} THEN named END)::text;
  IF octet_length(payload) > 7900 THEN
    payload := json_build_object('table', 'members', 'organization_ids', changed)::text;
  END IF;
  IF TG_OP = 'TRUNCATE' OR octet_length(payload) > 7900 THEN
    payload := json_build_object('table', 'members')::text;
  END IF;
  PERFORM pg_notify('${CHANNEL}', payload);
  RETURN NULL;
END
$$;
`
}, {
  version: 4,
  name: 'lists as documents their schema checks, and no check that restates a schema',
  sql: String.raw`
-- A provider and an endpoint are stored as the JSON document a file holds, checked by the replicas
-- with the same compiled schema as the files: no column, CHECK or pattern says it again, and a new
-- list kind is a table made from its registry entry (listTableSql). The rows move over in place,
-- their fields in the files' order, a field left out where omitted_fields said so.
ALTER TABLE providers RENAME TO providers_columns;
ALTER TABLE endpoints RENAME TO endpoints_columns;
DROP TRIGGER providers_notify ON providers_columns;
DROP TRIGGER endpoints_notify ON endpoints_columns;
ALTER TABLE providers_columns RENAME CONSTRAINT providers_pkey TO providers_columns_pkey;
ALTER TABLE endpoints_columns RENAME CONSTRAINT endpoints_pkey TO endpoints_columns_pkey;
CREATE TABLE IF NOT EXISTS providers (
  id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  position bigint,
  document json NOT NULL,
  slug text GENERATED ALWAYS AS (document ->> 'slug') STORED UNIQUE
);
CREATE OR REPLACE TRIGGER providers_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON providers
  FOR EACH STATEMENT EXECUTE FUNCTION directory_notify_table();
CREATE TABLE IF NOT EXISTS endpoints (
  id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
  position bigint,
  document json NOT NULL
);
CREATE OR REPLACE TRIGGER endpoints_notify AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON endpoints
  FOR EACH STATEMENT EXECUTE FUNCTION directory_notify_table();
INSERT INTO providers (position, document)
  SELECT position, (SELECT json_object_agg(field, value ORDER BY n) FROM (VALUES
      (1, 'name', to_json(name)), (2, 'slug', to_json(slug)), (3, 'privacy_policy_url', to_json(privacy_policy_url)),
      (4, 'terms_of_service_url', to_json(terms_of_service_url)), (5, 'status_page_url', to_json(status_page_url)),
      (6, 'headquarters', to_json(headquarters)), (7, 'datacenters', to_json(datacenters))) AS fields (n, field, value)
    WHERE NOT field = ANY (omitted_fields))
  FROM providers_columns ORDER BY position, slug;
CREATE FUNCTION pg_temp.ordered(value jsonb, fields text[]) RETURNS json LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN value IS NULL THEN NULL ELSE
    (SELECT json_object_agg(field, value -> field ORDER BY n) FROM unnest(fields) WITH ORDINALITY AS f (field, n)) END
$$;
INSERT INTO endpoints (position, document)
  SELECT position, json_build_object(
    'model_id', model_id, 'model_name', model_name, 'name', name, 'provider_name', provider_name, 'tag', tag,
    'context_length', context_length, 'max_prompt_tokens', max_prompt_tokens, 'max_completion_tokens', max_completion_tokens,
    'pricing', pg_temp.ordered(pricing, '{prompt,completion,image,request}'), 'quantization', quantization, 'status', status,
    'supported_parameters', supported_parameters, 'supports_implicit_caching', supports_implicit_caching,
    'supports_tool_choice', pg_temp.ordered(supports_tool_choice, '{auto,function,none,required}'),
    'latency_last_30m', pg_temp.ordered(latency_last_30m, '{p50,p75,p90,p99}'),
    'throughput_last_30m', pg_temp.ordered(throughput_last_30m, '{p50,p75,p90,p99}'),
    'uptime_last_5m', uptime_last_5m, 'uptime_last_30m', uptime_last_30m, 'uptime_last_1d', uptime_last_1d)
  FROM endpoints_columns ORDER BY position, id;
DROP TABLE providers_columns, endpoints_columns;
DROP FUNCTION directory_is_url(text), directory_is_country_code(text), directory_all_match(text[], text),
  directory_is_pricing(jsonb), directory_is_object_of(jsonb, text[], text);

-- The checks that restated a schema's pattern or list go: the replicas check every row they read,
-- and keep the last good version of a row they refuse. Keys, names and references stay.
ALTER TABLE keys DROP CONSTRAINT keys_name_check, DROP CONSTRAINT keys_sha256_check, DROP CONSTRAINT keys_kind_check,
  DROP CONSTRAINT keys_organization_id_check;
ALTER TABLE organizations DROP CONSTRAINT organizations_id_check, DROP CONSTRAINT organizations_name_check;
ALTER TABLE members DROP CONSTRAINT members_id_check, DROP CONSTRAINT members_email_check, DROP CONSTRAINT members_role_check;

-- A change of members names their organizations, which a replica reads again whole.
DROP TRIGGER members_notify_insert ON members;
DROP TRIGGER members_notify_update ON members;
DROP TRIGGER members_notify_delete ON members;
DROP TRIGGER members_notify_truncate ON members;
DROP FUNCTION directory_notify_members();
CREATE TRIGGER members_notify_insert AFTER INSERT ON members
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION directory_notify_rows('organization_id', 'organization_ids');
CREATE TRIGGER members_notify_update AFTER UPDATE ON members
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION directory_notify_rows('organization_id', 'organization_ids');
CREATE TRIGGER members_notify_delete AFTER DELETE ON members
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION directory_notify_rows('organization_id', 'organization_ids');
CREATE TRIGGER members_notify_truncate AFTER TRUNCATE ON members
  FOR EACH STATEMENT EXECUTE FUNCTION directory_notify_rows('organization_id', 'organization_ids');
`
}, {
  version: 5,
  name: 'a change log that replicas follow from a position',
  sql: String.raw`
-- Every statement that writes a table appends, in its own transaction, what it changed: the table,
-- the records named (key names, organization ids; none for a list, or for more than
-- ${NAMES_LOGGED} at once), and the writing transaction's id. A replica lists every table at one
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
  PERFORM pg_notify('${CHANNEL}', json_build_object('table', TG_TABLE_NAME)::text);
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
    VALUES (TG_TABLE_NAME, CASE WHEN cardinality(changed) <= ${NAMES_LOGGED} THEN changed END);
  payload := json_build_object('table', TG_TABLE_NAME, field, changed)::text;
  IF TG_OP = 'TRUNCATE' OR octet_length(payload) > 7900 THEN
    payload := json_build_object('table', TG_TABLE_NAME)::text;
  END IF;
  PERFORM pg_notify('${CHANNEL}', payload);
  RETURN NULL;
END
$$;
`
}, {
  version: 6,
  name: 'keys that expire',
  sql: String.raw`
-- From this instant on the key answers 401 on every replica, compared with each replica's clock: no
-- change to follow when it comes. Null: it never expires. A change of it is logged like any other.
ALTER TABLE keys ADD COLUMN expires_at timestamptz;
`
}, {
  version: 7,
  name: 'bounds a replica reads with, and checks of a key at write time',
  sql: String.raw`
DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'providers'::regclass AND attname = 'document_bytes' AND NOT attisdropped) THEN
    ALTER TABLE providers ADD COLUMN document_bytes bigint GENERATED ALWAYS AS (octet_length(document::text)) STORED;
  END IF;
END $$;
DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'endpoints'::regclass AND attname = 'document_bytes' AND NOT attisdropped) THEN
    ALTER TABLE endpoints ADD COLUMN document_bytes bigint GENERATED ALWAYS AS (octet_length(document::text)) STORED;
  END IF;
END $$;

-- What the database can check of a key cheaply, it refuses at write time, so that the writer learns at
-- once: its kind, and the shape and case of its hash (a value the schema refuses is a common way to
-- disable a key by hand, and the replicas do not serve such a row). Made from the key's schema, not
-- written here; validated after this transaction (validateChecks).
ALTER TABLE keys ADD CONSTRAINT keys_kind_check CHECK (kind IN ('standard', 'management')) NOT VALID;
ALTER TABLE keys ADD CONSTRAINT keys_sha256_check CHECK (char_length(sha256) = 64 AND sha256 !~ '[^0-9a-f]') NOT VALID;
`
}, {
  version: 8,
  name: 'the columns the replicas of 1.0.0 read, filled from the documents',
  sql: String.raw`
-- The replicas of 1.0.0 read providers and endpoints a column per field (schema 1). Schema 4 made them
-- documents, and from then on every read of theirs failed (column "name" does not exist), and none could
-- restart. Each column they read is back, filled from the document as it is written, so that they serve
-- on and restart until the replicas of this release replace them; this release's replicas read the
-- documents alone. The release after drops these columns (expand, then contract: docs/deployment.md).
-- A document past 8 MiB, which no replica reads, is not parsed. A document whose fields do not convert
-- (a count that is no integer) leaves the columns NULL: the replicas of 1.0.0 refuse that row as they
-- refused a bad row, and no write is refused for it.
ALTER TABLE providers ADD COLUMN name text, ADD COLUMN privacy_policy_url text, ADD COLUMN terms_of_service_url text,
  ADD COLUMN status_page_url text, ADD COLUMN headquarters text, ADD COLUMN datacenters text[], ADD COLUMN omitted_fields text[];
ALTER TABLE endpoints ADD COLUMN model_id text, ADD COLUMN model_name text, ADD COLUMN name text, ADD COLUMN provider_name text,
  ADD COLUMN tag text, ADD COLUMN context_length bigint, ADD COLUMN max_prompt_tokens bigint, ADD COLUMN max_completion_tokens bigint,
  ADD COLUMN pricing jsonb, ADD COLUMN quantization text, ADD COLUMN status bigint, ADD COLUMN supported_parameters text[],
  ADD COLUMN supports_implicit_caching boolean, ADD COLUMN supports_tool_choice jsonb, ADD COLUMN latency_last_30m jsonb,
  ADD COLUMN throughput_last_30m jsonb, ADD COLUMN uptime_last_5m double precision, ADD COLUMN uptime_last_30m double precision,
  ADD COLUMN uptime_last_1d double precision;
CREATE TYPE directory_provider_columns AS (name text, privacy_policy_url text, terms_of_service_url text, status_page_url text,
  headquarters text, datacenters text[]);
CREATE TYPE directory_endpoint_columns AS (model_id text, model_name text, name text, provider_name text, tag text,
  context_length bigint, max_prompt_tokens bigint, max_completion_tokens bigint, pricing jsonb, quantization text, status bigint,
  supported_parameters text[], supports_implicit_caching boolean, supports_tool_choice jsonb, latency_last_30m jsonb,
  throughput_last_30m jsonb, uptime_last_5m double precision, uptime_last_30m double precision, uptime_last_1d double precision);

CREATE FUNCTION directory_provider_columns() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  fields text[];
BEGIN
  NEW.name := NULL; NEW.privacy_policy_url := NULL; NEW.terms_of_service_url := NULL; NEW.status_page_url := NULL;
  NEW.headquarters := NULL; NEW.datacenters := NULL; NEW.omitted_fields := '{}';
  IF pg_column_size(NEW.document) <= 8388608 AND json_typeof(NEW.document) = 'object' THEN
    BEGIN
      SELECT * INTO NEW.name, NEW.privacy_policy_url, NEW.terms_of_service_url, NEW.status_page_url, NEW.headquarters, NEW.datacenters
        FROM json_populate_record(NULL::directory_provider_columns, NEW.document);
      fields := ARRAY(SELECT json_object_keys(NEW.document));
      NEW.omitted_fields := ARRAY(SELECT field FROM unnest('{terms_of_service_url,status_page_url,headquarters,datacenters}'::text[])
        WITH ORDINALITY AS optional (field, n) WHERE field <> ALL (fields) ORDER BY n);
    EXCEPTION WHEN others THEN
      NULL;
    END;
  END IF;
  RETURN NEW;
END
$$;
CREATE FUNCTION directory_endpoint_columns() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.model_id := NULL; NEW.model_name := NULL; NEW.name := NULL; NEW.provider_name := NULL; NEW.tag := NULL;
  NEW.context_length := NULL; NEW.max_prompt_tokens := NULL; NEW.max_completion_tokens := NULL; NEW.pricing := NULL;
  NEW.quantization := NULL; NEW.status := NULL; NEW.supported_parameters := NULL; NEW.supports_implicit_caching := NULL;
  NEW.supports_tool_choice := NULL; NEW.latency_last_30m := NULL; NEW.throughput_last_30m := NULL;
  NEW.uptime_last_5m := NULL; NEW.uptime_last_30m := NULL; NEW.uptime_last_1d := NULL;
  IF pg_column_size(NEW.document) <= 8388608 AND json_typeof(NEW.document) = 'object' THEN
    BEGIN
      SELECT * INTO NEW.model_id, NEW.model_name, NEW.name, NEW.provider_name, NEW.tag, NEW.context_length, NEW.max_prompt_tokens,
          NEW.max_completion_tokens, NEW.pricing, NEW.quantization, NEW.status, NEW.supported_parameters, NEW.supports_implicit_caching,
          NEW.supports_tool_choice, NEW.latency_last_30m, NEW.throughput_last_30m, NEW.uptime_last_5m, NEW.uptime_last_30m, NEW.uptime_last_1d
        FROM json_populate_record(NULL::directory_endpoint_columns, NEW.document);
    EXCEPTION WHEN others THEN
      NULL;
    END;
  END IF;
  RETURN NEW;
END
$$;
CREATE TRIGGER providers_columns BEFORE INSERT OR UPDATE ON providers FOR EACH ROW EXECUTE FUNCTION directory_provider_columns();
CREATE TRIGGER endpoints_columns BEFORE INSERT OR UPDATE ON endpoints FOR EACH ROW EXECUTE FUNCTION directory_endpoint_columns();
-- The rows already there are filled with no change logged or notified: no record changes.
ALTER TABLE providers DISABLE TRIGGER providers_notify;
ALTER TABLE endpoints DISABLE TRIGGER endpoints_notify;
UPDATE providers SET document = document;
UPDATE endpoints SET document = document;
ALTER TABLE providers ENABLE TRIGGER providers_notify;
ALTER TABLE endpoints ENABLE TRIGGER endpoints_notify;
`
}, {
  version: 9,
  name: 'a change log no writer can forge',
  sql: String.raw`
-- The change log is written by the database alone. Its triggers append as the schema's owner (SECURITY
-- DEFINER), so that writers need no grant on the log; whatever writes a row, its transaction id and time
-- are the writing transaction's (an entry claiming an id of the future hid a later change from every
-- replica); and an entry, once written, is never changed (only trim removes entries).
CREATE FUNCTION directory_changes_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' THEN
    RAISE EXCEPTION 'the entries of directory_changes are never changed' USING ERRCODE = 'insufficient_privilege';
  END IF;
  NEW.txid := pg_current_xact_id();
  NEW.written_at := now();
  RETURN NEW;
END
$$;
CREATE TRIGGER directory_changes_stamp BEFORE INSERT OR UPDATE ON directory_changes
  FOR EACH ROW EXECUTE FUNCTION directory_changes_stamp();
ALTER FUNCTION directory_notify_table() SECURITY DEFINER SET search_path FROM CURRENT;
ALTER FUNCTION directory_notify_rows() SECURITY DEFINER SET search_path FROM CURRENT;
REVOKE ALL ON directory_changes, directory_changes_trimmed FROM PUBLIC;
`
}, {
  version: 10,
  name: 'an organization bounded to the most members a replica serves',
  sql: String.raw`
-- A replica refuses an organization of more than 100000 members (MAX_MEMBERS in member-list.ts): the
-- database refuses the statement that would make one, so that its writer learns at once, where every
-- replica stopped serving the organization and no one told the writer. Once per statement, with the
-- rows it wrote as a transition table: a row trigger counting the organization at each row cost a
-- count of up to 100000 rows per row. Only an organization the statement gives a member it did not have
-- can grow, so an update of a large organization's members in place counts nothing. Rows already
-- past the bound stay (the replicas refuse them, as before); the next statement that adds one is refused.
-- Two transactions that each stay within the bound may together pass it: the replicas refuse that
-- organization, and say so to its keys' holders (500).
CREATE FUNCTION directory_members_bound() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  over record;
BEGIN
  -- Joins, not IN (subquery): a transition table has no statistics, and PostgreSQL ran an IN over
  -- one as a subplan per member row, which made an update of 200000 members in place take 90 s.
  IF TG_OP = 'INSERT' THEN
    SELECT organization_id, count(*) AS members INTO over
      FROM members JOIN (SELECT DISTINCT organization_id FROM new_rows) AS grown USING (organization_id)
      GROUP BY organization_id HAVING count(*) > 100000 LIMIT 1;
  ELSE
    -- The organizations given a member they did not have: an update in place gives none.
    SELECT organization_id, count(*) AS members INTO over
      FROM members JOIN (SELECT DISTINCT organization_id FROM (
        SELECT organization_id, id FROM new_rows EXCEPT SELECT organization_id, id FROM old_rows) AS moved) AS grown USING (organization_id)
      GROUP BY organization_id HAVING count(*) > 100000 LIMIT 1;
  END IF;
  IF FOUND THEN
    RAISE EXCEPTION 'organization % would have % members, more than 100000, the most an organization may have', quote_literal(over.organization_id), over.members
      USING ERRCODE = 'check_violation', TABLE = 'members';
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER members_bound_insert AFTER INSERT ON members
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION directory_members_bound();
CREATE TRIGGER members_bound_update AFTER UPDATE ON members
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION directory_members_bound();
`
}, {
  version: 11,
  name: 'keys on day two: one name through rotation, disabled, their own limit, and their history',
  sql: String.raw`
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
-- (SET LOCAL), names why: 'prune' or 'import'.
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
    -- Paired by name: a row renamed shows as its old name and its new one.
    INSERT INTO key_history (name, action, changes)
      SELECT coalesce(after.name, before.name),
        CASE
          WHEN after.name IS NULL OR before.name IS NULL THEN 'renamed'
          WHEN reason = 'prune' THEN 'pruned'
          WHEN before.sha256 IS DISTINCT FROM after.sha256 THEN 'rotated'
          WHEN before.disabled IS DISTINCT FROM after.disabled THEN CASE WHEN after.disabled THEN 'disabled' ELSE 'enabled' END
          WHEN before.expires_at IS DISTINCT FROM after.expires_at THEN 'expiry set'
          WHEN before.rate_limit_per_minute IS DISTINCT FROM after.rate_limit_per_minute THEN 'limit set'
          ELSE 'changed'
        END,
        CASE WHEN after.name IS NULL OR before.name IS NULL THEN jsonb_build_object('name', jsonb_build_array(before.name, after.name))
          ELSE key_history_changes(to_jsonb(before), to_jsonb(after)) END
      FROM old_rows AS before FULL JOIN new_rows AS after ON before.name = after.name
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
`
}]

/** The schema version this build reads and writes. */
export const SCHEMA_VERSION = MIGRATIONS.at(-1)!.version

// Any constant both sides agree on: it names "the migration lock" among advisory locks.
const MIGRATION_LOCK = 7_208_114_231

/**
 * Brings the schema to SCHEMA_VERSION (or `target`, for a test of a migration), in one transaction,
 * then validates the checks made from the schemas (validateChecks); answers the versions applied.
 * Replicas and Jobs that run it at once queue on an advisory lock: the first applies, the others find
 * nothing left to do.
 */
export async function migrate (client: pg.ClientBase, target = SCHEMA_VERSION): Promise<number[]> {
  await refuseStandby(client, 'migrate')
  let pending: typeof MIGRATIONS = []
  await client.query('BEGIN')
  try {
    await client.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK])
    await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version integer PRIMARY KEY,
      name text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now()
    )`)
    const { rows } = await client.query<{ version: number }>('SELECT version FROM schema_migrations')
    const applied = new Set(rows.map((row) => row.version))
    pending = MIGRATIONS.filter((migration) => !applied.has(migration.version) && migration.version <= target)
    for (const migration of pending) {
      await client.query(migration.sql)
      await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [migration.version, migration.name])
    }
    await client.query('COMMIT')
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {})
    throw error
  }
  if (target >= 7) await validateChecks(client)
  // A kind registered without a migration that makes its table: said by migrate too, not only at start.
  if (target === SCHEMA_VERSION) await checkSchema(client)
  return pending.map((migration) => migration.version)
}

/**
 * Validates the checks made from the schemas that are not yet, each in a transaction of its own,
 * after the migration's: VALIDATE reads every row (some 0.1 s for the kind and 0.7 s for the hash at
 * a million keys), under a lock that lets reads and writes go on, where the migration's ALTER TABLE
 * holds every reader of the table until it commits. Rows already there that break a check (a key
 * "disabled" by hand) leave it NOT VALID, and a warning says how many there are: the replicas do not
 * serve them, new writes are checked all the same, and the next migrate validates it once they are
 * fixed. Never the cause of a failed migration, whose transaction would undo everything.
 */
async function validateChecks (client: pg.ClientBase) {
  const { rows } = await client.query<{ name: string }>("SELECT conname AS name FROM pg_constraint WHERE contype = 'c' AND NOT convalidated AND conname = ANY($1)",
    [KEY_CHECKS.map(({ name }) => name)])
  for (const { table, name, check } of KEY_CHECKS.filter(({ name }) => rows.some((row) => row.name === name))) {
    await client.query(`DO $$
BEGIN
  ALTER TABLE ${table} VALIDATE CONSTRAINT ${name};
EXCEPTION WHEN check_violation THEN
  RAISE WARNING '%', format('rows of table ${table} that break ${name} (%2$s): %1$s. The replicas do not serve them, and new ones are refused; fix or delete them, then run npm run db -- migrate again to validate the check',
    (SELECT count(*) FROM ${table} WHERE NOT (${check})), ${sqlString(check)});
END
$$`)
  }
}

/**
 * The columns every list kind's table has, whatever its kind, as a replica reads them (readList in
 * postgres.ts) and `npm run db -- export` does:
 * - `id`: the row's identity, which breaks ties in the list's order and names a row in messages where
 *   nothing else does: a bigint identity column, or, for a kind whose unique field is `id` (OpenRouter's
 *   models are keyed by it), that field's generated column itself, text, the primary key. A column of
 *   the table's own of that name would clash with the field's.
 * - `position`: the record's place in the list, which is read `ORDER BY position, id`.
 * - `document`: the record, the JSON document a file holds (json keeps its text, its fields in their order).
 * - `document_bytes`: the document's size in bytes, generated as it is written (stored): a replica leaves
 *   a document past its bound unread. json keeps no length apart from its text, and
 *   octet_length(document::text) would read and copy the whole document at every read; a stored column
 *   costs that once, to its writer.
 * Each other field the registry says is unique is a generated text column (`document ->> 'slug'`),
 * unique: an operator changes a record with one statement (`UPDATE providers SET document = '{...}'
 * WHERE slug = 'openai'`). A unique field named `position`, `document` or `document_bytes` would clash
 * with a column above, and the registry holds none (test/kinds.test.ts). A statement that writes the
 * table notifies the replicas (its trigger), which read the list again. A new kind's table is made by
 * a migration of its own, holding what listTableSql (test/postgres.ts) makes of its registry entry.
 */
export const LIST_COLUMNS: readonly string[] = ['id', 'position', 'document', 'document_bytes']

/**
 * The column whose value names a list's row in messages (`row slug "openai"`): the kind's key where it
 * is a unique field, a column of its own; else `id` where that is the unique field; else none, and the
 * row is named by its identity (`row id 3`).
 */
export function namingColumn (kind: RecordKind): string | undefined {
  const { key, unique } = KINDS[kind] as { key: string | undefined, unique: readonly string[] }
  if (key !== undefined && unique.includes(key)) return key
  return unique.includes('id') ? 'id' : undefined
}

/** The tables this build reads, each with the columns checkSchema makes sure of (none: the migrations' own). */
function tablesRead (): Map<string, readonly string[]> {
  const tables = new Map<string, readonly string[]>()
  for (const kind of RECORD_KINDS) {
    const naming = namingColumn(kind)
    tables.set(KINDS[kind].table, KINDS[kind].index === 'list' ? [...new Set([...LIST_COLUMNS, ...naming === undefined ? [] : [naming]])] : [])
  }
  for (const table of ['members', 'directory_changes', 'directory_changes_trimmed', 'key_history']) tables.set(table, [])
  return tables
}

/**
 * Throws a clear message unless the schema is at SCHEMA_VERSION or later (a newer build may have
 * migrated), and has every table this build reads, each list's with the columns a replica reads: a
 * list kind registered without its migration would otherwise fail at its first read with PostgreSQL's
 * `relation "models" does not exist`, which names neither the cause nor the fix.
 */
export async function checkSchema (client: pg.ClientBase) {
  const tables = tablesRead()
  const { rows } = await client.query<{ name: string, columns: string[] | null }>(`SELECT name, CASE WHEN to_regclass(name) IS NOT NULL THEN
      ARRAY(SELECT attname::text FROM pg_attribute WHERE attrelid = to_regclass(name) AND attnum > 0 AND NOT attisdropped) END AS columns
    FROM unnest($1::text[]) AS name`, [['schema_migrations', ...tables.keys()]])
  const found = new Map(rows.map(({ name, columns }) => [name, columns]))
  const version = found.get('schema_migrations')
    ? (await client.query<{ version: number | null }>('SELECT max(version) AS version FROM schema_migrations')).rows[0]?.version ?? null
    : null
  if (version === null || version < SCHEMA_VERSION) {
    throw new Error(schemaTooOld(version))
  }
  const missing = [...tables].flatMap(([table, columns]) => {
    const present = found.get(table)
    if (present === null || present === undefined) return [`table ${table}`]
    return columns.filter((column) => !present.includes(column)).map((column) => `column ${column} in table ${table}`)
  })
  if (missing.length > 0) {
    throw new Error(schemaLacks(missing, version))
  }
}

/** What checkSchema says of a database whose schema is older than this build's (null: none at all); docs/ quote it. */
export function schemaTooOld (version: number | null) {
  return `the database schema is at version ${version ?? 'none'}, this build needs ${SCHEMA_VERSION}: run npm run db -- migrate`
}

/** What checkSchema says of a database at this build's schema that lacks tables or columns it reads (`table models`); docs/ quote it. */
export function schemaLacks (missing: readonly string[], version: number) {
  return `the database has no ${missing.join(', no ')}, which this build reads, and its schema is at version ${version} already: ` +
    `no migration of this build makes ${missing.length === 1 ? 'it' : 'them'}; add one (CONTRIBUTING.md, "A new kind of record"), then run npm run db -- migrate`
}

/** A hot standby takes no write: say so in one line, rather than PostgreSQL's error at the first statement. */
async function refuseStandby (client: pg.ClientBase, command: string) {
  const { rows: [row] } = await client.query<{ recovery: boolean }>('SELECT pg_is_in_recovery() AS recovery')
  if (row?.recovery === true) throw new Error(`the database is a hot standby (read-only): run npm run db -- ${command} against the primary`)
}

/** How long the change log keeps an entry unless told otherwise: a replica cut off for less catches up from it. */
export const RETENTION_MS = 24 * 60 * 60 * 1000

/**
 * Removes the change log's entries written more than `olderThanMs` ago, and records the newest
 * transaction removed: a replica whose position had not seen it reads every table again. Then
 * VACUUM, so that the space is reused and the log stays the size of its retention.
 */
export async function trimChanges (client: pg.ClientBase, olderThanMs = RETENTION_MS): Promise<number> {
  await refuseStandby(client, 'trim')
  await checkSchema(client)
  const { rows: [row] } = await client.query<{ removed: string }>(`WITH gone AS (
      DELETE FROM directory_changes WHERE written_at < now() - $1 * interval '1 millisecond' RETURNING txid
    ), moved AS (
      UPDATE directory_changes_trimmed SET through = greatest(through, (SELECT max(txid) FROM gone)), trimmed_by = pg_current_xact_id()
        WHERE EXISTS (SELECT 1 FROM gone) RETURNING through
    )
    SELECT (SELECT count(*) FROM gone) AS removed, (SELECT count(*) FROM moved) AS moved`, [olderThanMs])
  await client.query('VACUUM directory_changes')
  return Number(row?.removed ?? 0)
}

/** Removes the entries of the keys' history written more than `olderThanMs` ago; answers how many. */
export async function trimKeyHistory (client: pg.ClientBase, olderThanMs: number): Promise<number> {
  await refuseStandby(client, 'trim')
  await checkSchema(client)
  const { rowCount } = await client.query("DELETE FROM key_history WHERE at < now() - $1 * interval '1 millisecond'", [olderThanMs])
  return rowCount ?? 0
}

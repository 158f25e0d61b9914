CREATE TYPE public.directory_endpoint_columns AS (
	model_id text,
	model_name text,
	name text,
	provider_name text,
	tag text,
	context_length bigint,
	max_prompt_tokens bigint,
	max_completion_tokens bigint,
	pricing jsonb,
	quantization text,
	status bigint,
	supported_parameters text[],
	supports_implicit_caching boolean,
	supports_tool_choice jsonb,
	latency_last_30m jsonb,
	throughput_last_30m jsonb,
	uptime_last_5m double precision,
	uptime_last_30m double precision,
	uptime_last_1d double precision
);

CREATE TYPE public.directory_provider_columns AS (
	name text,
	privacy_policy_url text,
	terms_of_service_url text,
	status_page_url text,
	headquarters text,
	datacenters text[]
);

CREATE FUNCTION public.directory_changes_stamp() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  IF TG_OP = 'UPDATE' THEN
    RAISE EXCEPTION 'the entries of directory_changes are never changed' USING ERRCODE = 'insufficient_privilege';
  END IF;
  NEW.txid := pg_current_xact_id();
  NEW.written_at := now();
  RETURN NEW;
END
$$;

CREATE FUNCTION public.directory_endpoint_columns() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

CREATE FUNCTION public.directory_members_bound() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

CREATE FUNCTION public.directory_notify_rows() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '$user', 'public'
    AS $_$
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
$_$;

CREATE FUNCTION public.directory_notify_table() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '$user', 'public'
    AS $$
BEGIN
  INSERT INTO directory_changes (table_name) VALUES (TG_TABLE_NAME);
  PERFORM pg_notify('model_gateway_directory', json_build_object('table', TG_TABLE_NAME)::text);
  RETURN NULL;
END
$$;

CREATE FUNCTION public.directory_provider_columns() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

CREATE FUNCTION public.key_history_changes(before jsonb, after jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE
    AS $$
  SELECT coalesce(jsonb_object_agg(field, jsonb_build_array(old_value, new_value)), '{}'::jsonb)
      || CASE WHEN before->'sha256' IS DISTINCT FROM after->'sha256' THEN '{"sha256": "replaced"}'::jsonb ELSE '{}'::jsonb END
    FROM jsonb_each(key_history_fields(before)) AS old_fields (field, old_value)
    JOIN jsonb_each(key_history_fields(after)) AS new_fields (field, new_value) USING (field)
    WHERE old_value IS DISTINCT FROM new_value
$$;

CREATE FUNCTION public.key_history_fields(key jsonb) RETURNS jsonb
    LANGUAGE sql IMMUTABLE
    AS $$
  SELECT key - 'name' - 'sha256' - 'previous_sha256'
$$;

CREATE FUNCTION public.key_history_guard() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  IF current_user::regrole <> (SELECT relowner FROM pg_class WHERE oid = TG_RELID)::regrole THEN
    RAISE EXCEPTION 'the entries of key_history are written by the database alone (the trigger on keys), and removed by npm run db -- trim'
      USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NULL;
END
$$;

CREATE FUNCTION public.key_history_record() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO '$user', 'public'
    AS $$
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

CREATE FUNCTION public.key_history_trim(older_than interval) RETURNS bigint
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO '$user', 'public'
    AS $$
  WITH gone AS (DELETE FROM key_history WHERE at < now() - older_than RETURNING 1) SELECT count(*) FROM gone
$$;

CREATE FUNCTION public.key_history_unchanged() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  RAISE EXCEPTION 'the entries of key_history are never changed' USING ERRCODE = 'insufficient_privilege';
END
$$;

CREATE FUNCTION public.keys_name_fixed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
  RAISE EXCEPTION 'key % cannot be renamed to %: a key keeps its name; mint a key of the new name and revoke this one', quote_literal(OLD.name), quote_literal(NEW.name)
    USING ERRCODE = 'check_violation', TABLE = 'keys';
END
$$;

CREATE TABLE public.directory_changes (
    txid xid8 DEFAULT pg_current_xact_id() NOT NULL,
    table_name text NOT NULL,
    names text[],
    written_at timestamp with time zone DEFAULT now() NOT NULL
);

CREATE TABLE public.directory_changes_trimmed (
    only_row boolean DEFAULT true NOT NULL,
    through xid8 NOT NULL,
    trimmed_by xid8 NOT NULL,
    CONSTRAINT directory_changes_trimmed_only_row_check CHECK (only_row)
);

CREATE TABLE public.endpoints (
    id bigint NOT NULL,
    "position" bigint,
    document json NOT NULL,
    document_bytes bigint GENERATED ALWAYS AS (octet_length((document)::text)) STORED,
    model_id text,
    model_name text,
    name text,
    provider_name text,
    tag text,
    context_length bigint,
    max_prompt_tokens bigint,
    max_completion_tokens bigint,
    pricing jsonb,
    quantization text,
    status bigint,
    supported_parameters text[],
    supports_implicit_caching boolean,
    supports_tool_choice jsonb,
    latency_last_30m jsonb,
    throughput_last_30m jsonb,
    uptime_last_5m double precision,
    uptime_last_30m double precision,
    uptime_last_1d double precision
);

ALTER TABLE public.endpoints ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME public.endpoints_id_seq1
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE public.key_history (
    id bigint NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    name text,
    action text NOT NULL,
    changes jsonb,
    role text DEFAULT SESSION_USER NOT NULL,
    client text DEFAULT NULLIF(current_setting('application_name'::text), ''::text),
    txid xid8 DEFAULT pg_current_xact_id() NOT NULL
);

ALTER TABLE public.key_history ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.key_history_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE public.keys (
    name text NOT NULL,
    sha256 text NOT NULL,
    kind text NOT NULL,
    organization_id text NOT NULL,
    expires_at timestamp with time zone,
    disabled boolean DEFAULT false NOT NULL,
    rate_limit_per_minute integer,
    previous_sha256 text,
    previous_expires_at timestamp with time zone,
    CONSTRAINT keys_kind_check CHECK ((kind = ANY (ARRAY['standard'::text, 'management'::text]))),
    CONSTRAINT keys_previous_check CHECK (((previous_sha256 IS NULL) = (previous_expires_at IS NULL))),
    CONSTRAINT keys_previous_sha256_check CHECK (((char_length(previous_sha256) = 64) AND (previous_sha256 !~ '[^0-9a-f]'::text))),
    CONSTRAINT keys_rate_limit_check CHECK (((rate_limit_per_minute >= 1) AND (rate_limit_per_minute <= 1000000000))),
    CONSTRAINT keys_sha256_check CHECK (((char_length(sha256) = 64) AND (sha256 !~ '[^0-9a-f]'::text)))
);

CREATE TABLE public.members (
    organization_id text NOT NULL,
    id text NOT NULL,
    "position" bigint,
    email text NOT NULL,
    first_name text,
    last_name text,
    role text NOT NULL
);

CREATE TABLE public.organizations (
    id text NOT NULL,
    "position" bigint,
    name text NOT NULL
);

CREATE TABLE public.providers (
    id bigint NOT NULL,
    "position" bigint,
    document json NOT NULL,
    slug text GENERATED ALWAYS AS ((document ->> 'slug'::text)) STORED,
    document_bytes bigint GENERATED ALWAYS AS (octet_length((document)::text)) STORED,
    name text,
    privacy_policy_url text,
    terms_of_service_url text,
    status_page_url text,
    headquarters text,
    datacenters text[],
    omitted_fields text[]
);

ALTER TABLE public.providers ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME public.providers_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL,
    checksum text
);

ALTER TABLE ONLY public.directory_changes_trimmed
    ADD CONSTRAINT directory_changes_trimmed_pkey PRIMARY KEY (only_row);

ALTER TABLE ONLY public.endpoints
    ADD CONSTRAINT endpoints_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.key_history
    ADD CONSTRAINT key_history_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.keys
    ADD CONSTRAINT keys_pkey PRIMARY KEY (name);

ALTER TABLE ONLY public.keys
    ADD CONSTRAINT keys_sha256_key UNIQUE (sha256);

ALTER TABLE ONLY public.members
    ADD CONSTRAINT members_pkey PRIMARY KEY (organization_id, id);

ALTER TABLE ONLY public.organizations
    ADD CONSTRAINT organizations_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.providers
    ADD CONSTRAINT providers_pkey PRIMARY KEY (id);

ALTER TABLE ONLY public.providers
    ADD CONSTRAINT providers_slug_key UNIQUE (slug);

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

CREATE INDEX directory_changes_txid ON public.directory_changes USING btree (txid);

CREATE INDEX key_history_at ON public.key_history USING brin (at);

CREATE INDEX key_history_name ON public.key_history USING btree (name, id);

CREATE INDEX members_order ON public.members USING btree (organization_id, "position", id);

CREATE TRIGGER directory_changes_stamp BEFORE INSERT OR UPDATE ON public.directory_changes FOR EACH ROW EXECUTE FUNCTION public.directory_changes_stamp();

CREATE TRIGGER endpoints_columns BEFORE INSERT OR UPDATE ON public.endpoints FOR EACH ROW EXECUTE FUNCTION public.directory_endpoint_columns();

CREATE TRIGGER endpoints_notify AFTER INSERT OR DELETE OR UPDATE OR TRUNCATE ON public.endpoints FOR EACH STATEMENT EXECUTE FUNCTION public.directory_notify_table();

CREATE TRIGGER key_history_guard BEFORE INSERT OR DELETE OR TRUNCATE ON public.key_history FOR EACH STATEMENT EXECUTE FUNCTION public.key_history_guard();

CREATE TRIGGER key_history_unchanged BEFORE UPDATE ON public.key_history FOR EACH ROW EXECUTE FUNCTION public.key_history_unchanged();

CREATE TRIGGER keys_history_delete AFTER DELETE ON public.keys REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION public.key_history_record();

CREATE TRIGGER keys_history_insert AFTER INSERT ON public.keys REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.key_history_record();

CREATE TRIGGER keys_history_truncate AFTER TRUNCATE ON public.keys FOR EACH STATEMENT EXECUTE FUNCTION public.key_history_record();

CREATE TRIGGER keys_history_update AFTER UPDATE ON public.keys REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.key_history_record();

CREATE TRIGGER keys_name_fixed BEFORE UPDATE OF name ON public.keys FOR EACH ROW WHEN ((old.name IS DISTINCT FROM new.name)) EXECUTE FUNCTION public.keys_name_fixed();

CREATE TRIGGER keys_notify_delete AFTER DELETE ON public.keys REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION public.directory_notify_rows('name', 'names');

CREATE TRIGGER keys_notify_insert AFTER INSERT ON public.keys REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.directory_notify_rows('name', 'names');

CREATE TRIGGER keys_notify_truncate AFTER TRUNCATE ON public.keys FOR EACH STATEMENT EXECUTE FUNCTION public.directory_notify_rows('name', 'names');

CREATE TRIGGER keys_notify_update AFTER UPDATE ON public.keys REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.directory_notify_rows('name', 'names');

CREATE TRIGGER members_bound_insert AFTER INSERT ON public.members REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.directory_members_bound();

CREATE TRIGGER members_bound_update AFTER UPDATE ON public.members REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.directory_members_bound();

CREATE TRIGGER members_notify_delete AFTER DELETE ON public.members REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION public.directory_notify_rows('organization_id', 'organization_ids');

CREATE TRIGGER members_notify_insert AFTER INSERT ON public.members REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.directory_notify_rows('organization_id', 'organization_ids');

CREATE TRIGGER members_notify_truncate AFTER TRUNCATE ON public.members FOR EACH STATEMENT EXECUTE FUNCTION public.directory_notify_rows('organization_id', 'organization_ids');

CREATE TRIGGER members_notify_update AFTER UPDATE ON public.members REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.directory_notify_rows('organization_id', 'organization_ids');

CREATE TRIGGER organizations_notify_delete AFTER DELETE ON public.organizations REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION public.directory_notify_rows('id', 'ids');

CREATE TRIGGER organizations_notify_insert AFTER INSERT ON public.organizations REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.directory_notify_rows('id', 'ids');

CREATE TRIGGER organizations_notify_truncate AFTER TRUNCATE ON public.organizations FOR EACH STATEMENT EXECUTE FUNCTION public.directory_notify_rows('id', 'ids');

CREATE TRIGGER organizations_notify_update AFTER UPDATE ON public.organizations REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.directory_notify_rows('id', 'ids');

CREATE TRIGGER providers_columns BEFORE INSERT OR UPDATE ON public.providers FOR EACH ROW EXECUTE FUNCTION public.directory_provider_columns();

CREATE TRIGGER providers_notify AFTER INSERT OR DELETE OR UPDATE OR TRUNCATE ON public.providers FOR EACH STATEMENT EXECUTE FUNCTION public.directory_notify_table();

ALTER TABLE ONLY public.members
    ADD CONSTRAINT members_organization_id_fkey FOREIGN KEY (organization_id) REFERENCES public.organizations(id) ON UPDATE CASCADE ON DELETE CASCADE;


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

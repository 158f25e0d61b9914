
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
  PERFORM pg_notify('model_gateway_directory', payload);
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

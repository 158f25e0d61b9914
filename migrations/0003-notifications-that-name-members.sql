
-- A change of a few members names them too, by organization, position (as text: a bigint) and id,
-- before and after: a replica reads again the part of the organization's page order around them,
-- not a million members. More than 100 rows, or a payload past 7900 bytes, names the
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
      FROM (SELECT organization_id, position, id FROM %s AS touched LIMIT 101) AS named_rows', touched) INTO named, named_count;
  END IF;
  IF TG_OP <> 'TRUNCATE' AND changed IS NULL THEN
    RETURN NULL;
  END IF;
  payload := json_build_object('table', 'members', 'organization_ids', changed,
    'members', CASE WHEN named_count <= 100 THEN named END)::text;
  IF octet_length(payload) > 7900 THEN
    payload := json_build_object('table', 'members', 'organization_ids', changed)::text;
  END IF;
  IF TG_OP = 'TRUNCATE' OR octet_length(payload) > 7900 THEN
    payload := json_build_object('table', 'members')::text;
  END IF;
  PERFORM pg_notify('model_gateway_directory', payload);
  RETURN NULL;
END
$$;

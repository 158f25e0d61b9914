
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

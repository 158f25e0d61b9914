
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

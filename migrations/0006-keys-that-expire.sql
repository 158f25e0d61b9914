
-- From this instant on the key answers 401 on every replica, compared with each replica's clock: no
-- change to follow when it comes. Null: it never expires. A change of it is logged like any other.
ALTER TABLE keys ADD COLUMN expires_at timestamptz;

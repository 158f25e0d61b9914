
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

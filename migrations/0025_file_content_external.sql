-- A file's bytes are read a slice at a time (substring, src/files/files.ts `fileSlices`): kept
-- out of line and uncompressed (EXTERNAL), a slice reads only its own TOAST chunks; compressed (the
-- default, EXTENDED), each slice decompresses the file from its start. Files stored before this keep
-- their compression and still read the same, only slower (substring works on either); no rewrite.
ALTER TABLE "files" ALTER COLUMN "content" SET STORAGE EXTERNAL;

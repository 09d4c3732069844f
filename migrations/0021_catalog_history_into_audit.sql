-- The catalog's change history becomes rows of the operators' audit trail (inserts are allowed; the
-- trail refuses only updates and deletes). Each change keeps who declared it, when, and its `after`
-- as the catalog's change reply: {object: catalog_change, action, price_version, model, by}. A change
-- already in the trail (the admin guard recorded it: same model and price version) is not copied twice.
INSERT INTO "operator_audit" ("actor", "role", "via", "action", "target", "after", "created_at")
SELECT c."actor", 'unknown', 'declared',
  CASE c."action" WHEN 'alias' THEN 'catalog.alias' WHEN 'retire' THEN 'catalog.retire' ELSE 'catalog.put' END,
  c."model_id",
  jsonb_build_object('object', 'catalog_change', 'action', c."action", 'price_version', c."version_id", 'model', c."detail", 'by', c."actor"),
  c."created_at"
FROM "catalog_changes" c
WHERE NOT EXISTS (
  SELECT 1 FROM "operator_audit" a
  WHERE a."target" = c."model_id" AND a."action" LIKE 'catalog.%'
    AND a."after"->>'object' = 'catalog_change' AND a."after"->>'price_version' = c."version_id"::text
)
ORDER BY c."id";--> statement-breakpoint
DROP TABLE "catalog_changes" CASCADE;

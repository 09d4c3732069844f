ALTER TABLE "batches" ADD COLUMN "pricing" text DEFAULT 'live' NOT NULL;--> statement-breakpoint
ALTER TABLE "batches" ADD COLUMN "estimate" jsonb;--> statement-breakpoint
ALTER TABLE "batches" ADD CONSTRAINT "batches_pricing" CHECK ("batches"."pricing" IN ('batch', 'live', 'mixed'));
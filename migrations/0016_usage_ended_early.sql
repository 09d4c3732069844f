ALTER TABLE "usage_records" ADD COLUMN "ended_by" text;--> statement-breakpoint
ALTER TABLE "usage_records" ADD COLUMN "output_metered_units" integer;--> statement-breakpoint
ALTER TABLE "usage_records" ADD COLUMN "output_allowance_units" integer;
ALTER TABLE "usage_records" ADD COLUMN "hosted_call_units" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "usage_records" ADD COLUMN "hosted_call_price_per_1m" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "usage_records" ADD COLUMN "hosted_call_unit" text;
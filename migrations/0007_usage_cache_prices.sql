ALTER TABLE "usage_records" ADD COLUMN "cache_read_units" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "usage_records" ADD COLUMN "cache_read_price_per_1m" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "usage_records" ADD COLUMN "cache_write_units" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "usage_records" ADD COLUMN "cache_write_price_per_1m" bigint DEFAULT 0 NOT NULL;
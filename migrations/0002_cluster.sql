CREATE TABLE "key_partitions" (
	"partition" integer PRIMARY KEY NOT NULL,
	"fence_token" bigint DEFAULT 0 NOT NULL,
	"previous_fence_token" bigint DEFAULT 0 NOT NULL,
	"owner" text NOT NULL,
	"acquired_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "key_partitions_fence_non_negative" CHECK ("key_partitions"."fence_token" >= 0)
);
--> statement-breakpoint
ALTER TABLE "usage_records" ADD COLUMN "partition" integer;--> statement-breakpoint
ALTER TABLE "usage_records" ADD COLUMN "fence_token" bigint;
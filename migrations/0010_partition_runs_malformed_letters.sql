ALTER TABLE "usage_dead_letters" DROP CONSTRAINT "usage_dead_letters_source";--> statement-breakpoint
ALTER TABLE "key_partitions" ADD COLUMN "owner_since_token" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "key_partitions" ADD COLUMN "previous_acquired_at" timestamp with time zone DEFAULT now() NOT NULL;--> statement-breakpoint
ALTER TABLE "usage_dead_letters" ADD CONSTRAINT "usage_dead_letters_source" CHECK ("usage_dead_letters"."source" IN ('writer', 'consumer', 'deliveries', 'malformed'));--> statement-breakpoint
-- A partition's current tenure begins its owner's run.
UPDATE "key_partitions" SET "owner_since_token" = "fence_token", "previous_acquired_at" = "acquired_at";
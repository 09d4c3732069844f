CREATE TABLE "usage_dead_letters" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"request_id" text NOT NULL,
	"account_id" text NOT NULL,
	"hold_id" text NOT NULL,
	"record" text NOT NULL,
	"reason" text NOT NULL,
	"sql_state" text,
	"source" text NOT NULL,
	"written_off_micro" bigint DEFAULT 0 NOT NULL,
	"status" text DEFAULT 'dead' NOT NULL,
	"replayed_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "usage_dead_letters_request_id_unique" UNIQUE("request_id"),
	CONSTRAINT "usage_dead_letters_written_off_non_negative" CHECK ("usage_dead_letters"."written_off_micro" >= 0),
	CONSTRAINT "usage_dead_letters_status" CHECK ("usage_dead_letters"."status" IN ('dead', 'replayed')),
	CONSTRAINT "usage_dead_letters_source" CHECK ("usage_dead_letters"."source" IN ('writer', 'consumer', 'deliveries'))
);
--> statement-breakpoint
CREATE INDEX "usage_dead_letters_dead_idx" ON "usage_dead_letters" USING btree ("created_at") WHERE "usage_dead_letters"."status" = 'dead';
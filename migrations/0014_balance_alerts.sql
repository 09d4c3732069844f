CREATE TABLE "balance_alerts" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"balance_micro" bigint NOT NULL,
	"threshold_micro" bigint NOT NULL,
	"status" text DEFAULT 'pending' NOT NULL,
	"reason" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"ended_at" timestamp with time zone,
	CONSTRAINT "balance_alerts_status" CHECK ("balance_alerts"."status" IN ('pending', 'sending', 'sent', 'skipped'))
);
--> statement-breakpoint
ALTER TABLE "accounts" ADD COLUMN "low_balance_threshold_micro" bigint;--> statement-breakpoint
ALTER TABLE "balance_alerts" ADD CONSTRAINT "balance_alerts_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "balance_alerts_pending_idx" ON "balance_alerts" USING btree ("id") WHERE "balance_alerts"."status" = 'pending';--> statement-breakpoint
CREATE INDEX "balance_alerts_account_idx" ON "balance_alerts" USING btree ("account_id","created_at");
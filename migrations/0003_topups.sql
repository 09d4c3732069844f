CREATE TABLE "topups" (
	"id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"provider" text NOT NULL,
	"amount_micro" bigint NOT NULL,
	"state" text NOT NULL,
	"authority" text,
	"ref_id" text,
	"card_pan" text,
	"card_hash" text,
	"fee_micro" bigint,
	"reason" text,
	"replies" jsonb DEFAULT '[]'::jsonb NOT NULL,
	"attempts" integer DEFAULT 0 NOT NULL,
	"claim_until" timestamp with time zone,
	"expires_at" timestamp with time zone NOT NULL,
	"verified_at" timestamp with time zone,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "topups_authority_unique" UNIQUE("authority"),
	CONSTRAINT "topups_amount_positive" CHECK ("topups"."amount_micro" > 0),
	CONSTRAINT "topups_fee_non_negative" CHECK ("topups"."fee_micro" IS NULL OR "topups"."fee_micro" >= 0),
	CONSTRAINT "topups_state" CHECK ("topups"."state" IN ('created', 'redirected', 'verifying', 'verified', 'failed', 'expired', 'needs_review', 'reversed'))
);
--> statement-breakpoint
ALTER TABLE "topups" ADD CONSTRAINT "topups_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE UNIQUE INDEX "topups_provider_ref_idx" ON "topups" USING btree ("provider","ref_id");--> statement-breakpoint
CREATE INDEX "topups_state_idx" ON "topups" USING btree ("state","updated_at");--> statement-breakpoint
CREATE INDEX "topups_account_idx" ON "topups" USING btree ("account_id","created_at");
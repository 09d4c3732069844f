CREATE TABLE "accounts" (
	"id" text PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "api_keys" (
	"id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"name" text NOT NULL,
	"hash" text NOT NULL,
	"display" text NOT NULL,
	"concurrency_max" integer NOT NULL,
	"rpm" integer,
	"tpm" integer,
	"monthly_spend_cap_micro" bigint,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"revoked_at" timestamp with time zone,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "api_keys_hash_unique" UNIQUE("hash")
);
--> statement-breakpoint
CREATE TABLE "exchange_rates" (
	"id" serial PRIMARY KEY NOT NULL,
	"toman_per_usd" bigint NOT NULL,
	"effective_at" timestamp with time zone NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "holds" (
	"id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"key_id" text NOT NULL,
	"request_id" text NOT NULL,
	"amount_micro" bigint NOT NULL,
	"posted_micro" bigint DEFAULT 0 NOT NULL,
	"status" text NOT NULL,
	"deadline" timestamp with time zone NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "holds_amount_non_negative" CHECK ("holds"."amount_micro" >= 0),
	CONSTRAINT "holds_posted_within_amount" CHECK ("holds"."posted_micro" >= 0 AND "holds"."posted_micro" <= "holds"."amount_micro"),
	CONSTRAINT "holds_status" CHECK ("holds"."status" IN ('pending', 'posted', 'voided', 'expired'))
);
--> statement-breakpoint
CREATE TABLE "ledger_transfers" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"reference" text NOT NULL,
	"debit_account" text NOT NULL,
	"credit_account" text NOT NULL,
	"amount_micro" bigint NOT NULL,
	"kind" text NOT NULL,
	"memo" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "ledger_transfers_reference_unique" UNIQUE("reference"),
	CONSTRAINT "ledger_transfers_positive" CHECK ("ledger_transfers"."amount_micro" > 0),
	CONSTRAINT "ledger_transfers_two_sides" CHECK ("ledger_transfers"."debit_account" <> "ledger_transfers"."credit_account")
);
--> statement-breakpoint
CREATE TABLE "models" (
	"id" text PRIMARY KEY NOT NULL,
	"operation" text NOT NULL,
	"vendor" text NOT NULL,
	"context_window" integer NOT NULL,
	"open_weight" boolean NOT NULL,
	"listing" integer NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "price_versions" (
	"id" serial PRIMARY KEY NOT NULL,
	"rate_id" integer NOT NULL,
	"effective_at" timestamp with time zone NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "prices" (
	"version_id" integer NOT NULL,
	"model_id" text NOT NULL,
	"unit" text NOT NULL,
	"usd_per_1m" text NOT NULL,
	"toman_per_1m" bigint NOT NULL,
	CONSTRAINT "prices_version_id_model_id_unit_pk" PRIMARY KEY("version_id","model_id","unit"),
	CONSTRAINT "prices_non_negative" CHECK ("prices"."toman_per_1m" >= 0)
);
--> statement-breakpoint
CREATE TABLE "usage_records" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"request_id" text NOT NULL,
	"account_id" text NOT NULL,
	"key_id" text NOT NULL,
	"hold_id" text NOT NULL,
	"model" text NOT NULL,
	"operation" text NOT NULL,
	"backend" text,
	"price_version_id" integer NOT NULL,
	"input_units" bigint NOT NULL,
	"output_units" bigint NOT NULL,
	"input_price_per_1m" bigint NOT NULL,
	"output_price_per_1m" bigint NOT NULL,
	"metered_micro" bigint NOT NULL,
	"billed_micro" bigint NOT NULL,
	"status" integer NOT NULL,
	"duration_ms" integer NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "usage_records_request_id_unique" UNIQUE("request_id"),
	CONSTRAINT "usage_records_billed_within_metered" CHECK ("usage_records"."billed_micro" >= 0 AND "usage_records"."billed_micro" <= "usage_records"."metered_micro")
);
--> statement-breakpoint
CREATE TABLE "wallets" (
	"account_id" text PRIMARY KEY NOT NULL,
	"balance_micro" bigint DEFAULT 0 NOT NULL,
	"held_micro" bigint DEFAULT 0 NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "wallets_held_non_negative" CHECK ("wallets"."held_micro" >= 0),
	CONSTRAINT "wallets_available_non_negative" CHECK ("wallets"."balance_micro" - "wallets"."held_micro" >= 0)
);
--> statement-breakpoint
ALTER TABLE "api_keys" ADD CONSTRAINT "api_keys_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "holds" ADD CONSTRAINT "holds_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "price_versions" ADD CONSTRAINT "price_versions_rate_id_exchange_rates_id_fk" FOREIGN KEY ("rate_id") REFERENCES "public"."exchange_rates"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "prices" ADD CONSTRAINT "prices_version_id_price_versions_id_fk" FOREIGN KEY ("version_id") REFERENCES "public"."price_versions"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "prices" ADD CONSTRAINT "prices_model_id_models_id_fk" FOREIGN KEY ("model_id") REFERENCES "public"."models"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "wallets" ADD CONSTRAINT "wallets_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "api_keys_account_idx" ON "api_keys" USING btree ("account_id");--> statement-breakpoint
CREATE INDEX "api_keys_updated_idx" ON "api_keys" USING btree ("updated_at");--> statement-breakpoint
CREATE INDEX "holds_pending_deadline_idx" ON "holds" USING btree ("deadline") WHERE "holds"."status" = 'pending';--> statement-breakpoint
CREATE INDEX "ledger_transfers_debit_idx" ON "ledger_transfers" USING btree ("debit_account");--> statement-breakpoint
CREATE INDEX "ledger_transfers_credit_idx" ON "ledger_transfers" USING btree ("credit_account");--> statement-breakpoint
CREATE INDEX "usage_records_key_idx" ON "usage_records" USING btree ("key_id","created_at");--> statement-breakpoint
CREATE INDEX "usage_records_account_idx" ON "usage_records" USING btree ("account_id","created_at");
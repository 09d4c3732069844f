CREATE TABLE "operator_adjust_days" (
	"operator_id" text NOT NULL,
	"day_start" timestamp with time zone NOT NULL,
	"used_micro" bigint NOT NULL,
	CONSTRAINT "operator_adjust_days_operator_id_day_start_pk" PRIMARY KEY("operator_id","day_start"),
	CONSTRAINT "operator_adjust_days_used_non_negative" CHECK ("operator_adjust_days"."used_micro" >= 0)
);
--> statement-breakpoint
CREATE TABLE "operator_audit" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"actor" text NOT NULL,
	"role" text NOT NULL,
	"via" text NOT NULL,
	"token_id" text,
	"address" text,
	"action" text NOT NULL,
	"target" text NOT NULL,
	"before" jsonb,
	"after" jsonb,
	"reason" text,
	"amount_micro" bigint,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "operator_sessions" (
	"id" text PRIMARY KEY NOT NULL,
	"token_hash" text NOT NULL,
	"operator_id" text NOT NULL,
	"client_address" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"last_used_at" timestamp with time zone DEFAULT now() NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"revoked_at" timestamp with time zone,
	CONSTRAINT "operator_sessions_token_hash_unique" UNIQUE("token_hash")
);
--> statement-breakpoint
CREATE TABLE "operator_signin_failures" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"login" text NOT NULL,
	"address" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE TABLE "operator_tokens" (
	"id" text PRIMARY KEY NOT NULL,
	"operator_id" text NOT NULL,
	"name" text NOT NULL,
	"hash" text NOT NULL,
	"display" text NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"revoked_at" timestamp with time zone,
	CONSTRAINT "operator_tokens_hash_unique" UNIQUE("hash")
);
--> statement-breakpoint
CREATE TABLE "operators" (
	"id" text PRIMARY KEY NOT NULL,
	"login" text NOT NULL,
	"name" text NOT NULL,
	"role" text NOT NULL,
	"password_hash" text NOT NULL,
	"totp_secret" text NOT NULL,
	"totp_last_step" bigint DEFAULT 0 NOT NULL,
	"adjust_daily_max_micro" bigint NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"removed_at" timestamp with time zone,
	CONSTRAINT "operators_login_unique" UNIQUE("login"),
	CONSTRAINT "operators_role" CHECK ("operators"."role" IN ('owner', 'finance', 'support', 'viewer'))
);
--> statement-breakpoint
ALTER TABLE "operator_adjust_days" ADD CONSTRAINT "operator_adjust_days_operator_id_operators_id_fk" FOREIGN KEY ("operator_id") REFERENCES "public"."operators"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "operator_sessions" ADD CONSTRAINT "operator_sessions_operator_id_operators_id_fk" FOREIGN KEY ("operator_id") REFERENCES "public"."operators"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "operator_tokens" ADD CONSTRAINT "operator_tokens_operator_id_operators_id_fk" FOREIGN KEY ("operator_id") REFERENCES "public"."operators"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "operator_audit_at_idx" ON "operator_audit" USING btree ("created_at");--> statement-breakpoint
CREATE INDEX "operator_audit_actor_idx" ON "operator_audit" USING btree ("actor","created_at");--> statement-breakpoint
CREATE INDEX "operator_audit_target_idx" ON "operator_audit" USING btree ("target","created_at");--> statement-breakpoint
CREATE INDEX "operator_sessions_operator_idx" ON "operator_sessions" USING btree ("operator_id","created_at");--> statement-breakpoint
CREATE INDEX "operator_signin_failures_login_idx" ON "operator_signin_failures" USING btree ("login","created_at");--> statement-breakpoint
CREATE INDEX "operator_signin_failures_address_idx" ON "operator_signin_failures" USING btree ("address","created_at");--> statement-breakpoint
CREATE INDEX "operator_tokens_operator_idx" ON "operator_tokens" USING btree ("operator_id");--> statement-breakpoint
CREATE FUNCTION operator_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'operator_audit is append-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
END;
$$;--> statement-breakpoint
CREATE TRIGGER operator_audit_no_update_delete BEFORE UPDATE OR DELETE ON "operator_audit"
  FOR EACH STATEMENT EXECUTE FUNCTION operator_audit_append_only();--> statement-breakpoint
CREATE TRIGGER operator_audit_no_truncate BEFORE TRUNCATE ON "operator_audit"
  FOR EACH STATEMENT EXECUTE FUNCTION operator_audit_append_only();

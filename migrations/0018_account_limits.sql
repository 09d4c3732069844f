ALTER TABLE "accounts" ADD COLUMN "concurrency_max" integer;--> statement-breakpoint
ALTER TABLE "accounts" ADD COLUMN "rpm" integer;--> statement-breakpoint
ALTER TABLE "accounts" ADD COLUMN "tpm" integer;--> statement-breakpoint
ALTER TABLE "accounts" ADD COLUMN "keys_max" integer;--> statement-breakpoint
ALTER TABLE "accounts" ADD COLUMN "key_concurrency_max" integer;--> statement-breakpoint
ALTER TABLE "accounts" ADD COLUMN "key_rpm_max" integer;--> statement-breakpoint
ALTER TABLE "accounts" ADD COLUMN "key_tpm_max" integer;
ALTER TABLE "api_keys" ADD COLUMN "allowed_models" text[];--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "allowed_ips" text[];
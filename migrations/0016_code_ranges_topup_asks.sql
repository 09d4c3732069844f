ALTER TABLE "otp_codes" ADD COLUMN "client_range" text;--> statement-breakpoint
ALTER TABLE "otp_codes" ADD COLUMN "device_id" text;--> statement-breakpoint
ALTER TABLE "topups" ADD COLUMN "asked_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "topups" ADD COLUMN "client_address" text;--> statement-breakpoint
CREATE INDEX "otp_codes_range_idx" ON "otp_codes" USING btree ("client_range","created_at");--> statement-breakpoint
CREATE INDEX "topups_address_idx" ON "topups" USING btree ("client_address","state");
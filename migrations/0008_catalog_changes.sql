CREATE TABLE "catalog_changes" (
	"id" serial PRIMARY KEY NOT NULL,
	"model_id" text NOT NULL,
	"action" text NOT NULL,
	"actor" text NOT NULL,
	"version_id" integer NOT NULL,
	"detail" jsonb NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "models" ADD COLUMN "aliases" jsonb DEFAULT '[]'::jsonb NOT NULL;--> statement-breakpoint
ALTER TABLE "models" ADD COLUMN "output_max" integer;--> statement-breakpoint
ALTER TABLE "models" ADD COLUMN "capabilities" jsonb DEFAULT '{}'::jsonb NOT NULL;--> statement-breakpoint
ALTER TABLE "models" ADD COLUMN "retired_at" timestamp with time zone;--> statement-breakpoint
ALTER TABLE "models" ADD COLUMN "successor" text;--> statement-breakpoint
ALTER TABLE "models" ADD COLUMN "source" jsonb;--> statement-breakpoint
ALTER TABLE "usage_records" ADD COLUMN "cache_write_1h_units" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "usage_records" ADD COLUMN "cache_write_1h_price_per_1m" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "catalog_changes" ADD CONSTRAINT "catalog_changes_model_id_models_id_fk" FOREIGN KEY ("model_id") REFERENCES "public"."models"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "catalog_changes" ADD CONSTRAINT "catalog_changes_version_id_price_versions_id_fk" FOREIGN KEY ("version_id") REFERENCES "public"."price_versions"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "catalog_changes_model_idx" ON "catalog_changes" USING btree ("model_id","created_at");
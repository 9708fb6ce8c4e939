"""``path("awa/", include("awa.contrib.django.urls"))``: the read-only queues page."""

from django.urls import path

from awa.contrib.django import views

app_name = "awa"
urlpatterns = [path("", views.queues, name="queues")]
